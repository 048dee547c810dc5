/* floor: the memory-bandwidth floor of a shared-memory collective, measured
 * on this machine in the same run as the collectives (bench/allreduce).
 *
 *   floor BYTES[,BYTES...]
 *       per size, one core: the median time of a copy of BYTES and of a
 *       reduce kernel (y += x over BYTES of float32), each over buffers
 *       already faulted in. The copy is the faster of memcpy and a copy with
 *       non-temporal stores (which write whole lines without reading them
 *       first; glibc's memcpy uses them only past most of the L3): a floor
 *       is the best this core does. One line per size:
 *       "floor bytes=B copy_us=C reduce_us=R memcpy_us=M stream_us=S".
 *   floor BYTES[,BYTES...] PROCS
 *       the same in PROCS processes at once, as the ranks of one node run a
 *       collective (on a busy machine one process gets a core more easily
 *       than two do): the slowest process's medians, on lines
 *       "floor procs=P bytes=B copy_us=C reduce_us=R".
 * run.sh turns these into a floor for each collective (the model is printed
 * with the table). A bare C program: nothing of the project is linked. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_buf.h"

#ifdef __x86_64__
#include <emmintrin.h>
#endif

#define REPS 9

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The reduce kernel the compiler vectorises at -O2 -ftree-vectorize: what a
 * good float32 sum loop costs per byte here. */
__attribute__((noinline, optimize("tree-vectorize"))) static void
add(float *restrict y, const float *restrict x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

/* A copy with non-temporal stores: up to y's next cache line by memcpy, then
 * whole lines (a line split between two stores' groups would be written in
 * part), then the rest by memcpy. */
__attribute__((noinline)) static void stream_copy(char *y, const char *x, size_t bytes)
{
#ifdef __x86_64__
	size_t head = (64 - ((uintptr_t)y & 63)) & 63, body;

	if (bytes < head + 64) {
		memcpy(y, x, bytes);
		return;
	}
	memcpy(y, x, head);
	y += head, x += head, bytes -= head;
	body = bytes & ~(size_t)63;
	for (size_t i = 0; i < body; i += 64)
		for (size_t k = 0; k < 64; k += 16)
			_mm_stream_si128((__m128i *)(y + i + k),
					 _mm_loadu_si128((const __m128i *)(x + i + k)));
	_mm_sfence();
	memcpy(y + body, x + body, bytes - body);
#else
	memcpy(y, x, bytes);
#endif
}

static double median(double *v)
{
	qsort(v, REPS, sizeof(double), cmp);
	return v[REPS / 2];
}

/* One process's medians (memcpy, reduce, streamed copy) at bytes, into out. */
static void measure(size_t bytes, double out[3])
{
	size_t n = bytes / 4;
	/* Small sizes repeat inside one timing so the clock's cost vanishes. */
	int inner = bytes < (1 << 20) ? (int)((1 << 22) / (bytes ? bytes : 1)) : 1;
	float *x = bench_buf(bytes), *y = bench_buf(bytes);
	double tc[REPS], tr[REPS], ts[REPS];

	if (!x || !y) {
		fprintf(stderr, "floor: no memory for 2 x %zu bytes\n", bytes);
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		x[i] = y[i] = 1.0f;
	for (int r = -1; r < REPS; r++) { /* r = -1 warms caches and pages */
		double t0 = now_us();
		for (int k = 0; k < inner; k++) {
			memcpy(y, x, bytes);
			__asm__ volatile("" ::"r"(y) : "memory");
		}
		double t1 = now_us();
		for (int k = 0; k < inner; k++) {
			add(y, x, n);
			__asm__ volatile("" ::"r"(y) : "memory");
		}
		double t2 = now_us();
		if (r >= 0) {
			tc[r] = (t1 - t0) / inner;
			tr[r] = (t2 - t1) / inner;
		}
	}
	/* Apart: its stores take y out of the cache, which a memcpy of a small
	 * size would then pay for. */
	for (int r = -1; r < REPS; r++) {
		double t0 = now_us();
		for (int k = 0; k < inner; k++) {
			stream_copy((char *)y, (const char *)x, bytes);
			__asm__ volatile("" ::"r"(y) : "memory");
		}
		if (r >= 0)
			ts[r] = (now_us() - t0) / inner;
	}
	out[0] = median(tc);
	out[1] = median(tr);
	out[2] = median(ts);
	free(x);
	free(y);
}

int main(int argc, char **argv)
{
	char *sp = NULL;
	int procs = argc == 3 ? atoi(argv[2]) : 1;

	if ((argc != 2 && argc != 3) || procs < 1 || procs > 64) {
		fprintf(stderr, "usage: floor BYTES[,BYTES...] [PROCS]\n");
		return 2;
	}
	/* Each process's three medians, where the parent reads them. */
	double *res = mmap(NULL, 3 * 64 * sizeof(double), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED)
		return 1;
	for (char *s = strtok_r(argv[1], ",", &sp); s; s = strtok_r(NULL, ",", &sp)) {
		size_t bytes = strtoull(s, NULL, 10);
		double c = 0, r = 0, m = 0, st = 0; /* the slowest process's */

		fflush(stdout);
		for (int p = 1; p < procs; p++)
			if (fork() == 0) {
				measure(bytes, res + 3 * p);
				_exit(0);
			}
		measure(bytes, res);
		while (wait(NULL) > 0)
			;
		for (int p = 0; p < procs; p++) {
			const double *v = res + 3 * p;
			double best = v[0] < v[2] ? v[0] : v[2];
			c = best > c ? best : c;
			r = v[1] > r ? v[1] : r;
			m = v[0] > m ? v[0] : m;
			st = v[2] > st ? v[2] : st;
		}
		if (procs > 1)
			printf("floor procs=%d ", procs);
		else
			printf("floor ");
		printf("bytes=%zu copy_us=%.2f reduce_us=%.2f memcpy_us=%.2f stream_us=%.2f\n",
		       bytes, c, r, m, st);
		fflush(stdout);
	}
	return 0;
}
