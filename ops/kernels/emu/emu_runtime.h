// The CPU emulator of Metal's execution model that runs pistil's generated MSL on Linux
// (package pistil/ops/kernels/emu builds it with clang++ and drives it).
//
// Each thread of a threadgroup is its own execution context, with its own stack and
// registers (a ucontext), and the threads of a group interleave only at threadgroup
// barriers and SIMD-group operations: a thread runs until it reaches one, where it waits
// until every thread of the group (or every lane of its 32-lane SIMD group) has arrived,
// and the next runnable thread (ascending thread index, or descending with the reverse
// schedule) continues. Every interleaving is therefore deterministic: a missing barrier
// shows up as a read of memory another thread has not written yet, on every run, not
// once in a while. (An earlier version ran each thread on its own OS thread with the same
// one-at-a-time schedule: the same semantics, a hundred times slower to switch.)
// Threadgroup memory is the kernels' function-static storage (groups run one after
// another). The emulator stops with a message naming the source line when the threads
// of a group meet at different barriers, when a barrier or SIMD operation is reached
// after some of its threads returned, or when no thread can run (deadlock).
#pragma once
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

namespace pz_emu {

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void fail(const char* fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "emulator: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	fflush(stderr);
	_exit(3);
}

enum State { Runnable, Waiting, Done };
enum SimdOp { OpSum, OpMax, OpXor, OpShuffle, OpBarrier };

struct Thread {
	ucontext_t ctx;
	void* stack = nullptr;
	State state = Runnable;
};

constexpr size_t stack_bytes = 256 << 10;

struct Simd {
	int arrived = 0, line = 0, op = 0;
	bool is_int = false;
	uint64_t in[32], arg[32], out[32];
};

// One launch's threads and the state of the group they are running.
struct Sched {
	int n = 0, nsimd = 0;
	bool reverse = false;
	std::vector<std::unique_ptr<Thread>> th;
	std::vector<Simd> simd;
	int bar_arrived = 0, bar_line = 0, done = 0;
	ucontext_t main_ctx; // the host, which runs the groups one after another
	const char* kernel = "";
	unsigned gx = 0, gy = 0, gz = 0;
};

inline Sched* sched;
inline int self = -1; // the emulated thread running now

// switch_to runs thread next, saving the caller's context in from (when it will resume).
inline void switch_to(ucontext_t* from, int next) {
	self = next;
	if (from) swapcontext(from, &sched->th[next]->ctx);
	else setcontext(&sched->th[next]->ctx);
}

// next_runnable is the thread to run after `from` (which is not runnable), or -1.
inline int next_runnable(int from) {
	Sched& s = *sched;
	for (int k = 1; k <= s.n; k++) {
		int i = s.reverse ? ((from - k) % s.n + s.n) % s.n : (from + k) % s.n;
		if (s.th[i]->state == Runnable) return i;
	}
	return -1;
}

[[noreturn]] inline void deadlock() {
	Sched& s = *sched;
	std::string where;
	for (int i = 0; i < s.n; i++) {
		if (s.th[i]->state != Waiting) continue;
		char buf[96];
		Simd& sg = s.simd[i / 32];
		if (sg.arrived > 0 && sg.line > 0) snprintf(buf, sizeof buf, " thread %d at the SIMD op of line %d;", i, sg.line);
		else snprintf(buf, sizeof buf, " thread %d at the barrier of line %d;", i, s.bar_line);
		where += buf;
		if (where.size() > 600) { where += " ..."; break; }
	}
	fail("%s group (%u,%u,%u): deadlock, no thread can run (%d of %d returned):%s", s.kernel, s.gx, s.gy, s.gz, s.done, s.n, where.c_str());
}

// wait blocks the calling thread until another thread makes it runnable again.
inline void wait() {
	Sched& s = *sched;
	s.th[self]->state = Waiting;
	int next = next_runnable(self);
	if (next < 0) deadlock();
	if (next != self) switch_to(&s.th[self]->ctx, next);
}

inline void group_barrier(int line) {
	Sched& s = *sched;
	if (s.done > 0) fail("%s group (%u,%u,%u): thread %d reached the barrier of line %d after %d threads of the group returned", s.kernel, s.gx, s.gy, s.gz, self, line, s.done);
	if (s.bar_arrived == 0) s.bar_line = line;
	else if (line != s.bar_line) fail("%s group (%u,%u,%u): thread %d reached the barrier of line %d while others wait at the barrier of line %d", s.kernel, s.gx, s.gy, s.gz, self, line, s.bar_line);
	if (++s.bar_arrived < s.n) {
		wait();
		return;
	}
	s.bar_arrived = 0;
	for (int i = 0; i < s.n; i++) if (i != self) s.th[i]->state = Runnable;
}

inline uint64_t bits(float v) { uint32_t u; memcpy(&u, &v, 4); return u; }
inline float as_float(uint64_t b) { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }

// simd runs one SIMD-group operation: every lane of the caller's SIMD group must reach
// the same one. The lane that arrives last computes every lane's result.
inline uint64_t simd(int op, bool is_int, uint64_t v, uint64_t arg, int line) {
	Sched& s = *sched;
	int g = self / 32, lane = self % 32;
	Simd& sg = s.simd[g];
	for (int i = 32 * g; i < 32 * g + 32; i++) {
		if (s.th[i]->state == Done) fail("%s group (%u,%u,%u): lane %d of SIMD group %d reached the SIMD op of line %d after lane %d returned", s.kernel, s.gx, s.gy, s.gz, lane, g, line, i % 32);
	}
	if (sg.arrived == 0) { sg.line = line; sg.op = op; sg.is_int = is_int; }
	else if (sg.line != line || sg.op != op) fail("%s group (%u,%u,%u): lane %d of SIMD group %d reached the SIMD op of line %d while other lanes wait at line %d", s.kernel, s.gx, s.gy, s.gz, lane, g, line, sg.line);
	sg.in[lane] = v;
	sg.arg[lane] = arg;
	if (++sg.arrived < 32) {
		wait();
		return sg.out[lane];
	}
	sg.arrived = 0;
	int line_done = sg.line;
	sg.line = 0;
	(void)line_done;
	for (int l = 0; l < 32; l++) {
		switch (op) {
		case OpSum:
		case OpMax: {
			// A fixed reduction tree, the same for every lane.
			if (is_int) {
				int64_t acc[32];
				for (int k = 0; k < 32; k++) acc[k] = (int32_t)sg.in[k];
				for (int w = 16; w > 0; w >>= 1) for (int k = 0; k < w; k++) acc[k] = op == OpSum ? acc[k] + acc[k + w] : (acc[k] > acc[k + w] ? acc[k] : acc[k + w]);
				sg.out[l] = (uint32_t)(int32_t)acc[0];
			} else {
				float acc[32];
				for (int k = 0; k < 32; k++) acc[k] = as_float(sg.in[k]);
				for (int w = 16; w > 0; w >>= 1) for (int k = 0; k < w; k++) acc[k] = op == OpSum ? acc[k] + acc[k + w] : std::fmax(acc[k], acc[k + w]);
				sg.out[l] = bits(acc[0]);
			}
			break;
		}
		case OpXor: sg.out[l] = sg.in[(l ^ (int)sg.arg[l]) & 31]; break;
		case OpShuffle: sg.out[l] = sg.in[(int)sg.arg[l] & 31]; break;
		case OpBarrier: sg.out[l] = 0; break;
		}
	}
	for (int i = 32 * g; i < 32 * g + 32; i++) if (i != self) s.th[i]->state = Runnable;
	return sg.out[lane];
}

// finish marks the caller's kernel invocation returned and runs the next thread; it does
// not return.
[[noreturn]] inline void finish() {
	Sched& s = *sched;
	s.th[self]->state = Done;
	s.done++;
	int g = self / 32;
	if (s.simd[g].arrived > 0) fail("%s group (%u,%u,%u): thread %d returned while lanes of its SIMD group wait at the SIMD op of line %d", s.kernel, s.gx, s.gy, s.gz, self, s.simd[g].line);
	if (s.bar_arrived > 0) fail("%s group (%u,%u,%u): thread %d returned while %d threads wait at the barrier of line %d", s.kernel, s.gx, s.gy, s.gz, self, s.bar_arrived, s.bar_line);
	if (s.done == s.n) setcontext(&s.main_ctx); // the group is over: back to the host
	int next = next_runnable(self);
	if (next < 0) deadlock();
	switch_to(nullptr, next); // this thread's context is finished; it is remade per group
}

} // namespace pz_emu
