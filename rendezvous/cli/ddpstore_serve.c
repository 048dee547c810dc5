/* ddpstore serve: a standalone store server on the default loop, until
 * SIGINT or SIGTERM (then a clean shutdown, exit 0). */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "ddpstore.h"
#include "store_addr.h"
#include "store_server.h"
#include "util.h"

/* Descriptors kept aside from connections (stdio, loop, listeners, logs). */
#define FD_RESERVE 32

struct serve {
	uv_loop_t *loop;
	struct store_server *srv;
	uv_signal_t sigint, sigterm;
	int signo;
};

static void on_closed(void *arg)
{
	struct serve *sv = arg;

	uv_close((uv_handle_t *)&sv->sigint, NULL);
	uv_close((uv_handle_t *)&sv->sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int signo)
{
	struct serve *sv = h->data;

	if (sv->signo)
		return;
	sv->signo = signo;
	store_server_close(sv->srv, on_closed, sv);
}

/* Write the port to path atomically: a temporary file, then rename, so a
 * reader never sees a partial number. */
static int write_port_file(const char *path, int port)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n);
	FILE *f;
	int rc = 0;

	if (tmp == NULL)
		return -ENOMEM;
	snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
	f = fopen(tmp, "w");
	if (f == NULL) {
		rc = -errno;
		free(tmp);
		return rc;
	}
	fprintf(f, "%d\n", port);
	if (fflush(f) != 0 || fsync(fileno(f)) != 0)
		rc = -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* store_server_start's -EHOSTUNREACH: a name of --host did not resolve
 * (binding never gives it). Say which, with the resolver's reason. */
static void say_unresolved(const char *hosts, int port)
{
	char *list = strdup(hosts), *part, *save = NULL;
	struct addrinfo *ai;
	int gai;

	for (part = list ? strtok_r(list, ",", &save) : NULL; part;
	     part = strtok_r(NULL, ",", &save)) {
		if (store_addr_resolve(part, port, true, &ai, &gai) == 0) {
			freeaddrinfo(ai);
			continue;
		}
		ddpstore_err("cannot listen on %s: the name '%s' does not resolve (%s)", hosts,
			     part, gai_strerror(gai));
		free(list);
		return;
	}
	free(list);
	ddpstore_err("cannot listen on %s: a name in it does not resolve", hosts);
}

int ddpstore_serve(const struct ddpstore_opts *o)
{
	struct store_server_opts so;
	struct serve sv;
	uint64_t nofile = 0;
	int port = o->port, rc;
	const char *env;

	memset(&sv, 0, sizeof(sv));
	store_server_opts_init(&so);
	/* The server reads "" as every interface: here it is a mistake (an
	 * unset variable), as an empty item of a list is. */
	if (o->host && store_server_host_check(o->host) < 0) {
		if (*o->host == '\0')
			ddpstore_err("--host is empty (leave it out to listen on every interface; "
				     "see ddpstore --help)");
		else
			ddpstore_err("bad value '%s' for --host (an empty item in the list; see "
				     "ddpstore --help)",
				     o->host);
		return EXIT_USAGE;
	}
	if (store_server_io_parse(getenv("DDP_STORE_IO"), &so.io) < 0) {
		ddpstore_err("bad DDP_STORE_IO '%s' (auto, uring or uv)", getenv("DDP_STORE_IO"));
		return EXIT_USAGE;
	}
	so.log_prefix = o->quiet ? NULL : "ddpstore";
	if (o->max_conns)
		so.max_conns = (unsigned)o->max_conns;
	if (o->max_key_len)
		so.max_key_len = (size_t)o->max_key_len;
	if (o->max_value_len)
		so.max_value_len = (size_t)o->max_value_len;
	if (o->max_multi_keys)
		so.max_multi_keys = (size_t)o->max_multi_keys;
	if (o->max_conn_buffer)
		so.max_conn_buffer = (size_t)o->max_conn_buffer;
	/* A request is held whole while it is read (but MULTI_SET's pairs): one
	 * that carries the longest key and value must fit. */
	if (so.max_conn_buffer < so.max_key_len + so.max_value_len + SERVE_SET_FRAMING) {
		ddpstore_err("--max-conn-buffer %zu cannot hold a SET of the longest key and value "
			     "(%zu + %zu bytes, and %d of framing): give at least %zu, or lower "
			     "--max-value-len or --max-key-len (see ddpstore --help)",
			     so.max_conn_buffer, so.max_key_len, so.max_value_len,
			     SERVE_SET_FRAMING,
			     so.max_key_len + so.max_value_len + SERVE_SET_FRAMING);
		return EXIT_USAGE;
	}
	if (port < 0) {
		env = getenv("MASTER_PORT");
		port = UTIL_MASTER_PORT;
		if (env && *env && util_parse_int(env, 0, UTIL_PORT_MAX, &port) < 0) {
			ddpstore_err("bad MASTER_PORT '%s'", env);
			return EXIT_USAGE;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	rc = store_server_raise_nofile(&nofile);
	if (rc == 0 && nofile < (uint64_t)so.max_conns + FD_RESERVE)
		ddpstore_err("warning: the open-files limit (RLIMIT_NOFILE) is %llu: at most about "
			     "%llu of the %u allowed connections can be served; raise the hard "
			     "limit (ulimit -Hn) or lower --max-conns",
			     (unsigned long long)nofile,
			     (unsigned long long)(nofile > FD_RESERVE ? nofile - FD_RESERVE : 0),
			     so.max_conns);
	sv.loop = uv_default_loop();
	rc = store_server_start(sv.loop, &so, o->host, port, &sv.srv);
	if (rc < 0) {
		if (rc == -EHOSTUNREACH && o->host)
			say_unresolved(o->host, port);
		else if (so.io == STORE_IO_URING)
			ddpstore_err(
				"cannot serve on %s port %d with io_uring (DDP_STORE_IO=uring): %s",
				o->host ? o->host : "*", port, uv_strerror(rc));
		else
			ddpstore_err("cannot listen on %s port %d: %s", o->host ? o->host : "*",
				     port, uv_strerror(rc));
		uv_run(sv.loop, UV_RUN_DEFAULT); /* finish the failed start's closes */
		uv_loop_close(sv.loop);
		return EXIT_ERROR;
	}
	port = store_server_port(sv.srv);
	store_server_io_prepare(sv.srv); /* now, so that the first line can say which */
	if (o->port_file && (rc = write_port_file(o->port_file, port)) < 0) {
		ddpstore_err("cannot write the port file %s: %s", o->port_file, strerror(-rc));
		store_server_close(sv.srv, NULL, NULL);
		uv_run(sv.loop, UV_RUN_DEFAULT);
		uv_loop_close(sv.loop);
		return EXIT_ERROR;
	}
	if (!o->quiet)
		fprintf(stderr, "ddpstore: serving on %s port %d (%s)\n", o->host ? o->host : "*",
			port, store_server_io(sv.srv));
	uv_signal_init(sv.loop, &sv.sigint);
	uv_signal_init(sv.loop, &sv.sigterm);
	sv.sigint.data = sv.sigterm.data = &sv;
	uv_signal_start(&sv.sigint, on_signal, SIGINT);
	uv_signal_start(&sv.sigterm, on_signal, SIGTERM);
	uv_run(sv.loop, UV_RUN_DEFAULT);
	uv_loop_close(sv.loop);
	return EXIT_OK;
}
