#include "textflag.h"

// func cpuVendor() (ebx, ecx, edx uint32)
//
// The vendor string CPUID's leaf 0 returns, in EBX, EDX, ECX order ("AuthenticAMD",
// "GenuineIntel").
TEXT ·cpuVendor(SB), NOSPLIT, $0-12
	XORL AX, AX
	XORL CX, CX
	CPUID
	MOVL BX, ebx+0(FP)
	MOVL CX, ecx+4(FP)
	MOVL DX, edx+8(FP)
	RET

// func cpuSignature() (eax uint32)
//
// CPUID's leaf 1 EAX: stepping, model, family and their extended fields.
TEXT ·cpuSignature(SB), NOSPLIT, $0-4
	MOVL $1, AX
	XORL CX, CX
	CPUID
	MOVL AX, eax+0(FP)
	RET
