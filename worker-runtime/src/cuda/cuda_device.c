/* cuda_device: GPU discovery for backend selection. A CUDA build must still run
 * where there is no GPU or no driver: cudaGetDeviceCount then fails, which
 * means "no GPU", and the cpu backend is used. */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "ddp_internal.h"

int ddpi_gpu_count(char *msg, size_t len)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		snprintf(msg, len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
		cudaGetLastError(); /* clear it so later CUDA calls do not see it */
		return 0;
	}
	if (n <= 0) {
		snprintf(msg, len, "no CUDA device visible (CUDA_VISIBLE_DEVICES?)");
		return 0;
	}
	return n;
}
