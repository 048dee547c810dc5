/* no_ipv6: run a program where socket(AF_INET6, ...) fails with
 * EAFNOSUPPORT, as on a kernel booted with ipv6.disable=1, to test the
 * fallbacks of those who listen on "::" where they can. (A network namespace
 * with IPv6 disabled is no such host: "::" still binds there.)
 *
 *   no_ipv6 PROGRAM [ARG...] */
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "seccomp_run.h"

int main(int argc, char **argv)
{
	/* The domain is the low 32 bits of args[0] (both arches are little
	 * endian). */
	struct sock_filter f[] = {
		SECCOMP_RUN_PROLOGUE(4),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};

	return seccomp_run("no_ipv6", f, sizeof(f) / sizeof(f[0]), argc, argv);
}
