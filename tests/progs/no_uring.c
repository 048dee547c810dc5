/* no_uring: run a program where io_uring_setup fails with EPERM, as under
 * Docker's default seccomp profile, to test the fallbacks of those who use
 * io_uring when it is there.
 *
 *   no_uring PROGRAM [ARG...] */
#include <errno.h>
#include <sys/syscall.h>

#include "seccomp_run.h"

int main(int argc, char **argv)
{
	struct sock_filter f[] = {
		SECCOMP_RUN_PROLOGUE(2),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};

	return seccomp_run("no_uring", f, sizeof(f) / sizeof(f[0]), argc, argv);
}
