// The emulator's libnvrtc.so: "compiles" the CUDA source with g++ against emu_rt.h (the
// CUDA builtins on the CPU, next to this library) into a shared library whose path is the
// "CUBIN"; every KERNEL(name, Args) gets an emu_launch_name wrapper and its args size.
#include <dlfcn.h>
#include <libgen.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <regex>
#include <fstream>
#include <sstream>
struct Prog { std::string src, log, path; };
extern "C" {
int nvrtcVersion(int* a, int* b) { *a = 12; *b = 8; return 0; }
int nvrtcCreateProgram(Prog** p, const char* src, const char*, int, const char* const*, const char* const*) { *p = new Prog{src, "", ""}; return 0; }
int nvrtcCompileProgram(Prog* p, int nopts, const char* const* opts) {
	Dl_info self;
	dladdr((void*)&nvrtcCompileProgram, &self);
	std::string lib = self.dli_fname, dir = lib.substr(0, lib.rfind('/'));
	char tmpl[] = "/tmp/pistil-emu-XXXXXX";
	if (!mkdtemp(tmpl)) { p->log = "emu: mkdtemp failed"; return 6; }
	std::string out = tmpl;
	std::string src = p->src;
	std::ostringstream w;
	std::regex re(R"(\n(KERNEL|KERNEL_BOUNDED|KERNEL_EARLY)\((\w+), (\w+)[,)])");
	for (std::sregex_iterator it(src.begin(), src.end(), re), end; it != end; ++it) {
		std::string name = (*it)[2], args = (*it)[3];
		w << "static void emu_body_" << name << "(const void* a) { " << name << "(*(const struct " << args << "*)a); }\n"
		  << "extern \"C\" size_t emu_argsize_" << name << " = sizeof(struct " << args << ");\n"
		  << "extern \"C\" void emu_launch_" << name << "(const void* a, unsigned gx, unsigned gy, unsigned gz, unsigned bx) { emu_run_grid(emu_body_" << name << ", a, gx, gy, gz, bx); }\n";
	}
	std::string cpp = out + "/kernels.cpp", so = out + "/kernels.so";
	std::ofstream(cpp) << "#include \"emu_rt.h\"\n" << src << "\n" << w.str();
	// Macro definitions (-DNAME=VALUE, the tuning macros) reach g++ as they reach NVRTC;
	// the other options (architecture, -lineinfo) mean nothing here.
	std::string defines;
	for (int i = 0; i < nopts; i++) {
		if (std::strncmp(opts[i], "-D", 2) == 0) defines += " '" + std::string(opts[i]) + "'";
	}
	std::string cmd = "g++ -O2 -std=c++17 -fPIC -shared -w" + defines + " -I" + dir + " " + cpp + " -o " + so + " 2>&1";
	FILE* f = popen(cmd.c_str(), "r");
	char buf[4096]; size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0) p->log.append(buf, n);
	int rc = pclose(f);
	p->path = so;
	return rc == 0 ? 0 : 6;
}
int nvrtcGetProgramLogSize(Prog* p, size_t* n) { *n = p->log.size() + 1; return 0; }
int nvrtcGetProgramLog(Prog* p, char* out) { std::memcpy(out, p->log.c_str(), p->log.size() + 1); return 0; }
int nvrtcGetCUBINSize(Prog* p, size_t* n) { *n = p->path.size() + 1; return 0; }
int nvrtcGetCUBIN(Prog* p, char* out) { std::memcpy(out, p->path.c_str(), p->path.size() + 1); return 0; }
int nvrtcDestroyProgram(Prog** p) { delete *p; *p = nullptr; return 0; }
const char* nvrtcGetErrorString(int r) { return r ? "emulated NVRTC error" : "NVRTC_SUCCESS"; }
}
