/* Unit tests for nproc_cpus (launcher/nproc.h): --nproc-per-node=cpu counts
 * the affinity mask, as torch._utils.cpu_count(), on a kernel whose mask is
 * larger than the default cpu_set_t too, and the online CPUs only where the
 * mask cannot be read. This file's sched_getaffinity stands in for the
 * kernel's (the executable's definition wins over libc's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "nproc.h"

/* The fake kernel: its mask's size in CPUs, the CPUs allowed, and an error
 * to give instead (0: none). */
static struct {
	int ncpus;
	const int *allowed;
	int nallowed;
	int err;
	int calls;
} kernel;

int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set)
{
	int i;

	(void)pid;
	kernel.calls++;
	if (kernel.err != 0) {
		errno = kernel.err;
		return -1;
	}
	/* Linux: EINVAL when the buffer is smaller than the kernel's mask. */
	if (size < CPU_ALLOC_SIZE(kernel.ncpus)) {
		errno = EINVAL;
		return -1;
	}
	CPU_ZERO_S(size, set);
	for (i = 0; i < kernel.nallowed; i++)
		CPU_SET_S((size_t)kernel.allowed[i], size, set);
	return 0;
}

static void set_kernel(int ncpus, const int *allowed, int nallowed, int err)
{
	kernel.ncpus = ncpus;
	kernel.allowed = allowed;
	kernel.nallowed = nallowed;
	kernel.err = err;
	kernel.calls = 0;
}

static void test_cpu_counts_the_affinity_mask(void **state)
{
	static const int one[] = {0};
	static const int three[] = {1, 5, 63};

	(void)state;
	set_kernel(64, one, 1, 0); /* taskset -c 0 */
	assert_int_equal(nproc_cpus(), 1);
	set_kernel(64, three, 3, 0);
	assert_int_equal(nproc_cpus(), 3);
}

static void test_a_mask_larger_than_cpu_setsize_is_read(void **state)
{
	static const int far[] = {0, CPU_SETSIZE + 7, 4 * CPU_SETSIZE - 1};

	(void)state;
	set_kernel(4 * CPU_SETSIZE, far, 3, 0);
	assert_int_equal(nproc_cpus(), 3);
	assert_true(kernel.calls > 1); /* it grew the mask on EINVAL */
}

static void test_an_unreadable_mask_counts_the_online_cpus(void **state)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	set_kernel(64, NULL, 0, EPERM);
	assert_int_equal(nproc_cpus(), online > 0 ? (int)online : 1);
	assert_int_equal(kernel.calls, 1); /* only EINVAL grows the mask */
}

/* More CPUs than workers a node may have: the cap a number given has. */
static void test_cpu_is_capped_at_the_most_workers(void **state)
{
	static int many[CLI_MAX_NPROC + 904];
	struct cli_opts o = {.nproc_kind = CLI_NPROC_CPU};
	char err[128];
	int i, n = 0;

	(void)state;
	for (i = 0; i < CLI_MAX_NPROC + 904; i++)
		many[i] = i;
	set_kernel(8 * CPU_SETSIZE, many, CLI_MAX_NPROC + 904, 0);
	assert_int_equal(nproc_cpus(), CLI_MAX_NPROC + 904);
	assert_int_equal(nproc_resolve(&o, &n, err, sizeof(err)), 0);
	assert_int_equal(n, CLI_MAX_NPROC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_counts_the_affinity_mask),
		cmocka_unit_test(test_a_mask_larger_than_cpu_setsize_is_read),
		cmocka_unit_test(test_an_unreadable_mask_counts_the_online_cpus),
		cmocka_unit_test(test_cpu_is_capped_at_the_most_workers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
