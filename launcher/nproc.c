/* nproc: count CPUs and CUDA devices (see nproc.h). */
#include "nproc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A mask this large is more CPUs than any kernel allows (NR_CPUS): past
 * it, EINVAL means something other than a small mask. */
#define AFFINITY_MAX_CPUS (1 << 22)

/* The CPUs this process may run on, or 0 if the kernel will not say. The
 * kernel refuses (EINVAL) a mask smaller than its own, which may be larger
 * than the default cpu_set_t (CPU_SETSIZE); grow it then, as CPython's
 * os.sched_getaffinity does. */
static int affinity_cpus(void)
{
	int ncpus;

	for (ncpus = CPU_SETSIZE; ncpus <= AFFINITY_MAX_CPUS; ncpus *= 2) {
		size_t size = CPU_ALLOC_SIZE(ncpus);
		cpu_set_t *set = CPU_ALLOC(ncpus);
		int n = 0, err = 0;

		if (set == NULL)
			return 0;
		if (sched_getaffinity(0, size, set) == 0)
			n = CPU_COUNT_S(size, set);
		else
			err = errno;
		CPU_FREE(set);
		if (err != EINVAL)
			return n;
	}
	return 0;
}

/* torch._utils.cpu_count(): len(os.sched_getaffinity(0)), so taskset,
 * cpusets and a container's CPU list shrink it; os.cpu_count() (the online
 * CPUs) only where the mask cannot be read. */
int nproc_cpus(void)
{
	int n = affinity_cpus();

	if (n == 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

struct gpu_answer {
	int32_t rc; /* 0, or a negative errno */
	int32_t count;
	char why[200];
};

/* In the child: ask the driver. CUresult 0 is success, 100 no device. */
static void count_in_child(int fd) __attribute__((noreturn));
static void count_in_child(int fd)
{
	struct gpu_answer a = {.rc = 0};
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (lib == NULL) {
		a.rc = -ENODEV;
		snprintf(a.why, sizeof(a.why), "no CUDA driver (%s)", dlerror());
	} else {
		int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
		int (*cu_count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
		int n = 0, r;

		if (cu_init == NULL || cu_count == NULL) {
			a.rc = -ENODEV;
			snprintf(a.why, sizeof(a.why),
				 "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
		} else if ((r = cu_init(0)) == 100) {
			a.count = 0;
		} else if (r != 0) {
			a.rc = -ENODEV;
			snprintf(a.why, sizeof(a.why), "cuInit failed (CUresult %d)", r);
		} else if ((r = cu_count(&n)) != 0) {
			a.rc = -ENODEV;
			snprintf(a.why, sizeof(a.why), "cuDeviceGetCount failed (CUresult %d)", r);
		} else {
			a.count = n;
		}
	}
	(void)!write(fd, &a, sizeof(a));
	_exit(0);
}

int nproc_gpus(char *err, size_t errlen)
{
	struct gpu_answer a = {.rc = -ENODEV};
	int p[2];
	pid_t pid;
	ssize_t r;

	if (pipe2(p, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		count_in_child(p[1]);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -errno;
	}
	do
		r = read(p[0], &a, sizeof(a));
	while (r < 0 && errno == EINTR);
	close(p[0]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (r != (ssize_t)sizeof(a)) {
		snprintf(err, errlen, "the CUDA driver crashed while counting devices");
		return -ENODEV;
	}
	a.why[sizeof(a.why) - 1] = '\0';
	if (a.rc != 0)
		snprintf(err, errlen, "%s", a.why);
	return a.rc != 0 ? a.rc : a.count;
}

/* A count of devices or CPUs as a number of workers: at most CLI_MAX_NPROC,
 * as a number given would be (a machine of more CPUs than that exists). */
static int capped(int count)
{
	return count > CLI_MAX_NPROC ? CLI_MAX_NPROC : count;
}

int nproc_resolve(const struct cli_opts *o, int *n, char *err, size_t errlen)
{
	char why[256] = "";
	int g;

	switch (o->nproc_kind) {
	case CLI_NPROC_NUM:
		*n = o->nproc;
		return 0;
	case CLI_NPROC_CPU:
		*n = capped(nproc_cpus());
		return 0;
	case CLI_NPROC_AUTO:
		g = nproc_gpus(why, sizeof(why));
		*n = capped(g > 0 ? g : nproc_cpus());
		return 0;
	case CLI_NPROC_GPU:
		g = nproc_gpus(why, sizeof(why));
		if (g > 0) {
			*n = capped(g);
			return 0;
		}
		if (g == 0)
			snprintf(why, sizeof(why), "the CUDA driver shows no device%s",
				 getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)"
								: "");
		snprintf(err, errlen, "--nproc-per-node=gpu: no visible GPU: %s", why);
		return -ENODEV;
	}
	return -EINVAL;
}
