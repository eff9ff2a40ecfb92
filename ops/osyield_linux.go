package ops

import "syscall"

// osYield gives the core to another thread the OS has waiting on it, if any (sched_yield):
// the worker pool's spins call it, so that on a machine shared with other processes a
// spinning worker steps aside instead of holding a core through its time slice.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
