/* seccomp_run: what the no_* test wrappers share: each makes one system call
 * fail as some host would, then runs a program under that filter.
 *
 *   name PROGRAM [ARG...] */
#ifndef DDP_TESTS_SECCOMP_RUN_H
#define DDP_TESTS_SECCOMP_RUN_H

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

/* Filter prologue: another architecture's calls (skip filter statements
 * ahead of them: the allow at the end) pass; then the call's number in A. */
#define SECCOMP_RUN_PROLOGUE(skip)                                               \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)), \
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 0, (skip) + 1), \
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

/* Install f (n statements) and exec argv[1..]: a process's exit status (2
 * usage, 1 seccomp refused, 127 no such program). */
static int seccomp_run(const char *name, struct sock_filter *f, size_t n, int argc, char **argv)
{
	struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};

	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [ARG...]\n", name);
		return 2;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
		fprintf(stderr, "%s: ", name);
		perror("seccomp");
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "%s: ", name);
	perror("exec");
	return 127;
}

#endif
