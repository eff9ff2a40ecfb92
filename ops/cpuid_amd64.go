package ops

// The processor's vendor and family, for the few tunings (prefetch distances and levels)
// that were measured to differ between processors with the same instruction sets.

func cpuVendor() (ebx, ecx, edx uint32)

func cpuSignature() (eax uint32)

// isAMD reports whether CPUID names the processor's vendor AuthenticAMD.
func isAMD() bool {
	ebx, ecx, edx := cpuVendor()
	return ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163 // "Auth" "enti" "cAMD"
}

// amdFamily is an AMD processor's family as /proc/cpuinfo's "cpu family" prints it (0x19:
// Zen 3 and Zen 4, 0x1A: Zen 5), 0 on other vendors' processors.
func amdFamily() int {
	if !isAMD() {
		return 0
	}
	return cpuFamily(cpuSignature())
}

// cpuFamily is the family of a CPUID leaf-1 signature: the base family (bits 8-11), plus
// the extended family (bits 20-27) when the base is 0xF.
func cpuFamily(eax uint32) int {
	family := int(eax>>8) & 0xf
	if family == 0xf {
		family += int(eax>>20) & 0xff
	}
	return family
}
