// The emulator's host: reads a job on stdin (memory image and launches), runs the
// launches in order, writes the memory image back on stdout. Device memory lives at
// pz_emu::base, so the u64 addresses in the args structs are real pointers here. The job
// format is written by emu.go (Machine.Run).
#include <unistd.h>

namespace pz_emu {

struct Entry {
	const char* name;
	size_t args;
	void (*run)(const void* args, uint3 gid, uint3 ngroups, uint tid, uint tgsize, uint lane, uint simd, uint nsimd);
};

constexpr uint64_t base = 1ull << 44;
constexpr uint64_t magic = 0x31554d455a50ull; // "PZEMU1"

struct Reader {
	std::vector<unsigned char> buf;
	size_t pos = 0;
	const unsigned char* take(size_t n) {
		if (pos + n > buf.size()) fail("job: truncated at byte %zu (want %zu more)", pos, n);
		pos += n;
		return buf.data() + pos - n;
	}
	uint64_t u64() { uint64_t v; memcpy(&v, take(8), 8); return v; }
	uint32_t u32() { uint32_t v; memcpy(&v, take(4), 4); return v; }
};

// The launch being run: what each thread's context starts with.
struct Running {
	const Entry* e;
	const unsigned char* args;
	uint3 ngroups;
};
inline Running running;

inline void thread_entry(int i) {
	Sched& s = *sched;
	uint3 gid;
	gid.x = s.gx; gid.y = s.gy; gid.z = s.gz;
	running.e->run(running.args, gid, running.ngroups, (uint)i, (uint)s.n, (uint)i % 32, (uint)i / 32, (uint)s.n / 32);
	finish();
}

inline void run_launch(const Entry& e, const unsigned char* args_in, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t n, bool reverse) {
	if (n < 32 || n > 1024 || n % 32 != 0) fail("%s: %u threads per group (the kernels assume a multiple of the SIMD width 32, at most 1024)", e.name, n);
	if ((uint64_t)gx * gy * gz == 0 || (uint64_t)gx * gy * gz > (1u << 22)) fail("%s: grid %ux%ux%u", e.name, gx, gy, gz);
	alignas(64) static unsigned char args[4096];
	if (e.args > sizeof args) fail("%s: %zu bytes of args", e.name, e.args);
	memcpy(args, args_in, e.args);
	static std::vector<std::unique_ptr<Thread>> pool; // stacks kept across launches
	while (pool.size() < n) {
		auto t = std::make_unique<Thread>();
		t->stack = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (t->stack == MAP_FAILED) fail("cannot map a thread stack: %s", strerror(errno));
		pool.push_back(std::move(t));
	}
	Sched s;
	s.n = (int)n;
	s.nsimd = (int)n / 32;
	s.reverse = reverse;
	s.kernel = e.name;
	s.simd.resize(s.nsimd);
	for (uint32_t i = 0; i < n; i++) s.th.push_back(std::move(pool[i]));
	sched = &s;
	running = Running{&e, args, {}};
	running.ngroups.x = gx; running.ngroups.y = gy; running.ngroups.z = gz;
	for (uint32_t z = 0; z < gz; z++) for (uint32_t y = 0; y < gy; y++) for (uint32_t x = 0; x < gx; x++) {
		for (uint32_t i = 0; i < n; i++) {
			Thread& t = *s.th[i];
			t.state = Runnable;
			getcontext(&t.ctx);
			t.ctx.uc_stack.ss_sp = t.stack;
			t.ctx.uc_stack.ss_size = stack_bytes;
			t.ctx.uc_link = nullptr;
			makecontext(&t.ctx, (void (*)())thread_entry, 1, (int)i);
		}
		for (auto& sg : s.simd) { sg.arrived = 0; sg.line = 0; }
		s.done = 0;
		s.bar_arrived = 0;
		s.gx = x; s.gy = y; s.gz = z;
		self = reverse ? (int)n - 1 : 0;
		swapcontext(&s.main_ctx, &s.th[self]->ctx);
	}
	for (uint32_t i = 0; i < n; i++) pool[i] = std::move(s.th[i]);
	sched = nullptr;
}

inline int host_main(const Entry* entries, size_t n_entries) {
	Reader r;
	unsigned char chunk[1 << 16];
	for (ssize_t got; (got = read(0, chunk, sizeof chunk)) != 0;) {
		if (got < 0) fail("reading the job: %s", strerror(errno));
		r.buf.insert(r.buf.end(), chunk, chunk + got);
	}
	if (r.u64() != magic) fail("job: bad magic");
	bool reverse = r.u32() != 0;
	uint64_t size = r.u64();
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t mapped = (size + page - 1) / page * page + page;
	void* mem = mmap((void*)base, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (mem != (void*)base) fail("cannot map device memory at %#llx: %s", (unsigned long long)base, strerror(errno));
	memcpy(mem, r.take(size), size);
	uint32_t launches = r.u32();
	bool trace = getenv("PISTIL_EMU_TRACE") != nullptr; // one line per launch, to find a slow or stuck one
	for (uint32_t l = 0; l < launches; l++) {
		uint32_t len = r.u32();
		std::string name((const char*)r.take(len), len);
		uint32_t gx = r.u32(), gy = r.u32(), gz = r.u32(), threads = r.u32(), alen = r.u32();
		const unsigned char* args = r.take(alen);
		const Entry* e = nullptr;
		for (size_t i = 0; i < n_entries; i++) if (name == entries[i].name) e = &entries[i];
		if (!e) fail("launch %u: no kernel %s", l, name.c_str());
		if (alen != e->args) fail("launch %u: %s takes %zu bytes of args, got %u", l, name.c_str(), e->args, alen);
		if (trace) fprintf(stderr, "emulator: launch %u %s grid %ux%ux%u x %u\n", l, e->name, gx, gy, gz, threads);
		run_launch(*e, args, gx, gy, gz, threads, reverse);
	}
	for (size_t off = 0; off < size;) {
		ssize_t w = write(1, (const char*)mem + off, size - off);
		if (w <= 0) fail("writing the memory image: %s", strerror(errno));
		off += (size_t)w;
	}
	return 0;
}

} // namespace pz_emu
