/* ddp_compat: prints what libddp computes, for tests/compat to compare with
 * real PyTorch. Reads one case per line on stdin, answers one line each:
 *   sampler LEN REPLICAS RANK SHUFFLE SEED EPOCH DROP_LAST -> the rank's indices
 *   randperm N SEED                                        -> the permutation
 *   permsum N SEED                                         -> sum of (i + 1) * perm[i]
 *                                                            mod 2^64, then perm[0..4]
 *   buckets FIRST_CAP CAP COUNT:DTYPE...                   -> "0,2 1 3" (torch's order,
 *           i.e. before DDP reverses it; dtype names as in ddp.h: f32 f64 f16 bf16 i32 i64)
 * SEED may be negative (taken modulo 2^64, like torch.Generator.manual_seed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "ddp_internal.h"

static void put_list(const uint64_t *v, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		printf(i ? " %llu" : "%llu", (unsigned long long)v[i]);
	printf("\n");
}

static int dtype_of(const char *s, enum ddp_dtype *dt)
{
	static const char *const names[] = {"f32", "f64", "f16", "bf16", "i32", "i64"};
	for (int i = 0; i < 6; i++)
		if (!strcmp(s, names[i])) {
			*dt = (enum ddp_dtype)i;
			return 0;
		}
	return -1;
}

static int do_buckets(char *rest)
{
	struct ddp_param p[512];
	struct ddpi_bucket_plan pl;
	static float dummy;
	unsigned long long first, cap;
	size_t n = 0;
	char *tok = strtok(rest, " \n");

	if (!tok || sscanf(tok, "%llu", &first) != 1 || !(tok = strtok(NULL, " \n")) ||
	    sscanf(tok, "%llu", &cap) != 1)
		return -1;
	while ((tok = strtok(NULL, " \n")) && n < 512) {
		char *colon = strchr(tok, ':');
		if (!colon)
			return -1;
		*colon = '\0';
		p[n] = (struct ddp_param){NULL, &dummy, strtoull(tok, NULL, 10), DDP_FLOAT32};
		if (dtype_of(colon + 1, &p[n].dtype) < 0)
			return -1;
		n++;
	}
	if (ddpi_bucket_plan(p, n, first, cap, &pl) < 0)
		return -1;
	/* Print torch's order: DDP's reduction order reversed back. */
	for (size_t b = pl.nbuckets; b-- > 0;) {
		for (size_t k = pl.start[b]; k < pl.start[b + 1]; k++)
			printf(k == pl.start[b] ? "%zu" : ",%zu", pl.order[k]);
		printf(b ? " " : "\n");
	}
	ddpi_bucket_plan_free(&pl);
	return 0;
}

int main(void)
{
	char line[65536];

	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long len, n, epoch;
		long long seed;
		int repl, rank, shuffle, drop;
		int rc = -1;

		if (sscanf(line, "sampler %llu %d %d %d %lld %llu %d", &len, &repl, &rank, &shuffle,
			   &seed, &epoch, &drop) == 7) {
			struct ddp_sampler s;
			if (ddp_sampler_init(&s, len, repl, rank, shuffle, (uint64_t)seed, drop) ==
			    0) {
				uint64_t *out = malloc((s.num_samples + 1) * sizeof(uint64_t));
				ddp_sampler_set_epoch(&s, epoch);
				if (out && ddp_sampler_indices(&s, out) == 0) {
					put_list(out, s.num_samples);
					rc = 0;
				}
				free(out);
			}
		} else if (sscanf(line, "randperm %llu %lld", &n, &seed) == 2) {
			uint64_t *out = malloc((n + 1) * sizeof(uint64_t));
			if (out && ddp_randperm(n, (uint64_t)seed, out) == 0) {
				put_list(out, n);
				rc = 0;
			}
			free(out);
		} else if (sscanf(line, "permsum %llu %lld", &n, &seed) == 2) {
			/* A permutation too long to print: sum of (i + 1) * r[i]
			 * modulo 2^64, then its first five values. */
			uint64_t *out = malloc((n + 1) * sizeof(uint64_t)), sum = 0;
			if (out && ddp_randperm(n, (uint64_t)seed, out) == 0) {
				for (uint64_t i = 0; i < n; i++)
					sum += (i + 1) * out[i];
				printf("%llu", (unsigned long long)sum);
				for (uint64_t i = 0; i < n && i < 5; i++)
					printf(" %llu", (unsigned long long)out[i]);
				printf("\n");
				rc = 0;
			}
			free(out);
		} else if (!strncmp(line, "buckets ", 8)) {
			rc = do_buckets(line + 8);
		}
		if (rc < 0)
			printf("error\n");
		fflush(stdout);
	}
	return 0;
}
