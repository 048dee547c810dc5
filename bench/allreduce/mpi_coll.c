/* mpi_coll: Open MPI's collectives timed exactly as bench_allreduce times
 * libddp's (one warm-up, a barrier, ITERS calls, the slowest rank's mean).
 * Built by bench/allreduce/run.sh with mpicc (Debian libopenmpi-dev), not by
 * the Makefile: the project itself never links MPI.
 *
 *   mpirun -np N mpi_coll OP BYTES[,BYTES...] ITERS[,ITERS...]
 *       OP: all_reduce (float32 sum), all_gather (BYTES is the whole
 *       gathered buffer, as nccl-tests count it), broadcast (root 0).
 *       One line per size: "mpi op=OP ranks=N bytes=B mean_us=T". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_buf.h"

static int run(const char *op, float *a, float *b, size_t n, int nranks)
{
	if (!strcmp(op, "all_reduce"))
		return MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	if (!strcmp(op, "all_gather"))
		return MPI_Allgather(a, (int)(n / (size_t)nranks), MPI_FLOAT, b,
				     (int)(n / (size_t)nranks), MPI_FLOAT, MPI_COMM_WORLD);
	return MPI_Bcast(a, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
	int rank, nranks;
	char *sp = NULL, *ip = NULL;

	MPI_Init(&argc, &argv);
	if (argc != 4 || (strcmp(argv[1], "all_reduce") && strcmp(argv[1], "all_gather") &&
			  strcmp(argv[1], "broadcast"))) {
		fprintf(stderr,
			"usage: mpi_coll all_reduce|all_gather|broadcast BYTES,... ITERS,...\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	for (char *s = strtok_r(argv[2], ",", &sp), *it = strtok_r(argv[3], ",", &ip); s && it;
	     s = strtok_r(NULL, ",", &sp), it = strtok_r(NULL, ",", &ip)) {
		size_t bytes = strtoull(s, NULL, 10), n = bytes / 4;
		int iters = atoi(it);
		float *a = bench_buf(n * 4), *b = bench_buf(n * 4);
		for (size_t i = 0; i < n; i++)
			a[i] = b[i] = 1.0f;
		run(argv[1], a, b, n, nranks);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int k = 0; k < iters; k++)
			run(argv[1], a, b, n, nranks);
		double mean = (MPI_Wtime() - t0) / iters, worst;
		MPI_Allreduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (rank == 0)
			printf("mpi op=%s ranks=%d bytes=%zu mean_us=%.1f\n", argv[1], nranks,
			       bytes, worst * 1e6);
		fflush(stdout);
		free(a);
		free(b);
	}
	MPI_Finalize();
	return 0;
}
