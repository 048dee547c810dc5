/* What every libFuzzer target here shares: its entry point, and CHECK, an
 * invariant the fuzzer reports as a crash when it does not hold. */
#ifndef DDP_FUZZ_H
#define DDP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#define CHECK(x)                          \
	do {                              \
		if (!(x))                 \
			__builtin_trap(); \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
