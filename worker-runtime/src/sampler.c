/* sampler: torch.utils.data.distributed.DistributedSampler, index for index.
 *
 * PyTorch (torch/utils/data/distributed.py, aten randperm_cpu, at::mt19937):
 *   num_samples = ceil(len / n), or with drop_last and len % n != 0
 *                 ceil((len - n) / n); total_size = num_samples * n
 *   indices     = randperm(len, generator seeded with seed + epoch) if shuffle,
 *                 else 0..len-1; padded by repeating from the start (or
 *                 truncated with drop_last) to total_size; then
 *                 indices[rank : total_size : n]
 *   randperm    = r[i] = i; for i in 0..len-2: z = gen() % (len - i),
 *                 swap(r[i], r[i + z]); gen() is a 32-bit mt19937 draw;
 *                 from len = (2^32 - 1) / 20 on (PyTorch >= 2.1; 1.13 kept
 *                 the first way), "inside-out": for i in 0..len-1:
 *                 z = gen64() % (i + 1), r[i] = r[z], r[z] = i, where gen64()
 *                 is two draws, the first the high half
 *   mt19937     = the standard generator seeded with the low 32 bits of seed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

#define MT_N 624
#define MT_M 397
/* aten's randperm_cpu: n < std::numeric_limits<uint32_t>::max() / 20 draws
 * the first way. */
#define RANDPERM_WIDE_FROM (UINT32_MAX / 20)

void ddpi_mt19937_seed(struct ddpi_mt19937 *m, uint64_t seed)
{
	m->state[0] = (uint32_t)seed;
	for (int j = 1; j < MT_N; j++)
		m->state[j] =
			1812433253u * (m->state[j - 1] ^ (m->state[j - 1] >> 30)) + (uint32_t)j;
	m->left = 1;
	m->next = 0;
}

static inline uint32_t twist(uint32_t u, uint32_t v)
{
	uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
	return (y >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_refill(struct ddpi_mt19937 *m)
{
	uint32_t *s = m->state;
	int k;

	for (k = 0; k < MT_N - MT_M; k++)
		s[k] = s[k + MT_M] ^ twist(s[k], s[k + 1]);
	for (; k < MT_N - 1; k++)
		s[k] = s[k + MT_M - MT_N] ^ twist(s[k], s[k + 1]);
	s[MT_N - 1] = s[MT_M - 1] ^ twist(s[MT_N - 1], s[0]);
	m->left = MT_N;
	m->next = 0;
}

uint32_t ddpi_mt19937_next(struct ddpi_mt19937 *m)
{
	uint32_t y;

	if (--m->left == 0)
		mt_refill(m);
	y = m->state[m->next++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

int ddp_randperm(uint64_t n, uint64_t seed, uint64_t *out)
{
	struct ddpi_mt19937 *m;

	if (n && !out)
		return ddpi_err(-EINVAL, "ddp_randperm: out is NULL");
	m = malloc(sizeof(*m));
	if (!m)
		return ddpi_err(-ENOMEM, "ddp_randperm: out of memory");
	ddpi_mt19937_seed(m, seed);
	if (n >= RANDPERM_WIDE_FROM) {
		/* A 32-bit draw modulo a length of its order is far from uniform. */
		for (uint64_t i = 0; i < n; i++) {
			uint64_t hi = ddpi_mt19937_next(m), lo = ddpi_mt19937_next(m);
			uint64_t z = ((hi << 32) | lo) % (i + 1);

			out[i] = i; /* (z may be i) */
			out[i] = out[z];
			out[z] = i;
		}
		free(m);
		return 0;
	}
	for (uint64_t i = 0; i < n; i++)
		out[i] = i;
	for (uint64_t i = 0; i + 1 < n; i++) {
		uint64_t z = ddpi_mt19937_next(m) % (n - i);
		uint64_t t = out[i];
		out[i] = out[i + z];
		out[i + z] = t;
	}
	free(m);
	return 0;
}

int ddp_sampler_init(struct ddp_sampler *s, uint64_t dataset_len, int num_replicas, int rank,
		     int shuffle, uint64_t seed, int drop_last)
{
	uint64_t n;

	if (!s)
		return ddpi_err(-EINVAL, "sampler: no sampler (NULL)");
	if (num_replicas < 1 || rank < 0 || rank >= num_replicas)
		return ddpi_err(-EINVAL, "sampler: rank %d is not in [0, %d)", rank, num_replicas);
	n = (uint64_t)num_replicas;
	memset(s, 0, sizeof(*s));
	s->dataset_len = dataset_len;
	s->num_replicas = num_replicas;
	s->rank = rank;
	s->shuffle = !!shuffle;
	s->drop_last = !!drop_last;
	s->seed = seed;
	if (drop_last && dataset_len % n != 0)
		/* ceil((len - n) / n) with Python's math.ceil: 0 when len < n. */
		s->num_samples = dataset_len > n ? (dataset_len - n + n - 1) / n : 0;
	else /* ceil(len / n), without len + n - 1 wrapping around */
		s->num_samples = dataset_len / n + (dataset_len % n != 0);
	if (s->num_samples > UINT64_MAX / n) {
		memset(s, 0, sizeof(*s));
		return ddpi_err(-EOVERFLOW,
				"sampler: %llu samples padded for %d ranks do not fit in 64 bits",
				(unsigned long long)dataset_len, num_replicas);
	}
	s->total_size = s->num_samples * n;
	return 0;
}

int ddp_sampler_init_ctx(struct ddp_sampler *s, const struct ddp_ctx *ctx, uint64_t dataset_len,
			 int shuffle, uint64_t seed, int drop_last)
{
	if (!ddpi_ctx_known(ctx)) /* a forked child may: it reads the rank only */
		return ddpi_err(-EINVAL, "sampler: no context (NULL or finalized)");
	return ddp_sampler_init(s, dataset_len, ddp_world_size(ctx), ddp_rank(ctx), shuffle, seed,
				drop_last);
}

void ddp_sampler_set_epoch(struct ddp_sampler *s, uint64_t epoch)
{
	if (s)
		s->epoch = epoch;
}

int ddp_sampler_indices(const struct ddp_sampler *s, uint64_t *out)
{
	uint64_t len, *perm = NULL, n;

	if (!s)
		return ddpi_err(-EINVAL, "sampler: no sampler (NULL)");
	len = s->dataset_len;
	n = (uint64_t)s->num_replicas;
	if (s->num_samples == 0)
		return 0;
	if (!out)
		return ddpi_err(-EINVAL, "sampler: out is NULL");
	if (s->shuffle) {
		int rc;
		if (len > SIZE_MAX / sizeof(uint64_t))
			return ddpi_err(-ENOMEM, "sampler: no memory for a permutation of %llu",
					(unsigned long long)len);
		perm = malloc(len * sizeof(uint64_t));
		if (!perm)
			return ddpi_err(-ENOMEM, "sampler: no memory for a permutation of %llu",
					(unsigned long long)len);
		rc = ddp_randperm(len, s->seed + s->epoch, perm);
		if (rc < 0) {
			free(perm);
			return rc;
		}
	}
	/* Position p of the padded list is original index p % len (padding repeats
	 * the list from the start as often as needed; truncation just stops). */
	for (uint64_t j = 0; j < s->num_samples; j++) {
		uint64_t p = (uint64_t)s->rank + j * n;
		uint64_t q = p % len;
		out[j] = perm ? perm[q] : q;
	}
	free(perm);
	return 0;
}
