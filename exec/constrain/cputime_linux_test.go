package constrain

import "golang.org/x/sys/unix"

// threadCPU is the calling OS thread's CPU time in nanoseconds: on a shared machine the
// wall time of a call includes time the scheduler gave to other processes.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
