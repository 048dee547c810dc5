/* floor: the memory-bandwidth floor of a shared-memory collective, measured
 * on this machine in the same run as the collectives (bench/allreduce).
 *
 *   floor BYTES[,BYTES...]
 *       per size, one core: the median time of a copy (memcpy of BYTES) and
 *       of a reduce kernel (y += x over BYTES of float32), each over buffers
 *       already faulted in. One line per size:
 *       "floor bytes=B copy_us=C reduce_us=R".
 *   floor BYTES[,BYTES...] PROCS
 *       the same in PROCS processes at once, as the ranks of one node run a
 *       collective (on a busy machine one process gets a core more easily
 *       than two do): the slowest process's medians, on lines
 *       "floor procs=P bytes=B copy_us=C reduce_us=R".
 * run.sh turns these into a floor for each collective (the model is printed
 * with the table). A bare C program: nothing of the project is linked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_buf.h"

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

/* One process's medians (copy, reduce) at bytes, into out. */
static void measure(size_t bytes, double *out)
{
	size_t n = bytes / 4;
	/* Small sizes repeat inside one timing so the clock's cost vanishes. */
	int inner = bytes < (1 << 20) ? (int)((1 << 22) / (bytes ? bytes : 1)) : 1;
	float *x = bench_buf(bytes), *y = bench_buf(bytes);
	double tc[REPS], tr[REPS];

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
	qsort(tc, REPS, sizeof(double), cmp);
	qsort(tr, REPS, sizeof(double), cmp);
	out[0] = tc[REPS / 2];
	out[1] = tr[REPS / 2];
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
	/* Each process's two medians, where the parent reads them. */
	double *res = mmap(NULL, 2 * 64 * sizeof(double), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED)
		return 1;
	for (char *s = strtok_r(argv[1], ",", &sp); s; s = strtok_r(NULL, ",", &sp)) {
		size_t bytes = strtoull(s, NULL, 10);
		double c = 0, r = 0;

		fflush(stdout);
		for (int p = 1; p < procs; p++)
			if (fork() == 0) {
				measure(bytes, res + 2 * p);
				_exit(0);
			}
		measure(bytes, res);
		while (wait(NULL) > 0)
			;
		for (int p = 0; p < procs; p++) {
			c = res[2 * p] > c ? res[2 * p] : c;
			r = res[2 * p + 1] > r ? res[2 * p + 1] : r;
		}
		if (procs > 1)
			printf("floor procs=%d bytes=%zu copy_us=%.2f reduce_us=%.2f\n", procs,
			       bytes, c, r);
		else
			printf("floor bytes=%zu copy_us=%.2f reduce_us=%.2f\n", bytes, c, r);
		fflush(stdout);
	}
	return 0;
}
