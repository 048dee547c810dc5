/* coll_call: the text of a collective call (see coll_call.h). */
#include <stdio.h>

#include "coll_call.h"
#include "ddp_internal.h"

void ddpi_call_describe(const struct ddpi_call *c, char *buf, size_t len)
{
	static const char *const ops[] = {"sum", "avg", "min", "max"};
	unsigned long long n = (unsigned long long)c->count, seq = (unsigned long long)c->seq + 1;

	switch (c->kind) {
	case DDPI_ALL_REDUCE:
		snprintf(buf, len, "all_reduce(%llu x %s, %s) #%llu", n,
			 ddpi_dtype_name((enum ddp_dtype)c->dt), c->op < 4 ? ops[c->op] : "?", seq);
		break;
	case DDPI_BROADCAST:
		snprintf(buf, len, "broadcast(%llu bytes from rank %d) #%llu", n, (int)c->root,
			 seq);
		break;
	case DDPI_ALL_GATHER:
		snprintf(buf, len, "all_gather(%llu bytes each) #%llu", n, seq);
		break;
	case DDPI_BARRIER:
		snprintf(buf, len, "barrier() #%llu", seq);
		break;
	default:
		snprintf(buf, len, "an unknown collective #%llu", seq);
	}
}

const char *ddpi_call_name(const struct ddpi_call *c)
{
	switch (c->kind) {
	case DDPI_ALL_REDUCE:
		return "all_reduce";
	case DDPI_BROADCAST:
		return "broadcast";
	case DDPI_ALL_GATHER:
		return "all_gather";
	case DDPI_BARRIER:
		return "barrier";
	}
	return NULL;
}
