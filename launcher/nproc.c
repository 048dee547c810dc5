/* nproc: count CPUs and CUDA devices (see nproc.h). */
#include "nproc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int nproc_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
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

int nproc_resolve(const struct cli_opts *o, int *n, char *err, size_t errlen)
{
	char why[256] = "";
	int g;

	switch (o->nproc_kind) {
	case CLI_NPROC_NUM:
		*n = o->nproc;
		return 0;
	case CLI_NPROC_CPU:
		*n = nproc_cpus();
		return 0;
	case CLI_NPROC_AUTO:
		g = nproc_gpus(why, sizeof(why));
		*n = g > 0 ? g : nproc_cpus();
		return 0;
	case CLI_NPROC_GPU:
		g = nproc_gpus(why, sizeof(why));
		if (g > 0) {
			*n = g > CLI_MAX_NPROC ? CLI_MAX_NPROC : g;
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
