/* libFuzzer target for a node's hang positions as read from the store
 * (launcher/hang.h: hang_where_decode), then judged as the requester does
 * (hang_verdict), encoded back, and each rank kept once (hang_where_unique). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hang_where *w = NULL, *w2 = NULL;
	size_t n = 0, n2 = 0, i, k;
	char *verdict, *s;
	int rc, culprits;

	rc = hang_where_decode(data, size, &w, &n);
	CHECK(rc >= -1);
	CHECK(rc < 0 ? n == 0 : (size_t)rc == n);
	CHECK((n == 0) == (w == NULL));
	verdict = hang_verdict(w, n, "  ", &culprits);
	CHECK(verdict != NULL);
	CHECK(culprits >= 0 && (size_t)culprits <= n);
	/* Whole lines, however many ranks and places. */
	CHECK(verdict[0] == '\0' || verdict[strlen(verdict) - 1] == '\n');
	free(verdict);
	/* Encoded again (rank -1 records are left out), the same records. */
	s = hang_where_encode(w, n);
	CHECK(s != NULL);
	CHECK(hang_where_decode(s, strlen(s), &w2, &n2) >= 0);
	for (i = 0, k = 0; i < n; i++) {
		if (w[i].rank < 0)
			continue;
		CHECK(k < n2);
		CHECK(w2[k].rank == w[i].rank && w2[k].libddp == w[i].libddp &&
		      w2[k].in == w[i].in && w2[k].op == w[i].op);
		CHECK(!w[i].in || w2[k].wait == w[i].wait);
		k++;
	}
	CHECK(k == n2);
	/* Each rank once, the first record of it kept where it was. */
	k = hang_where_unique(w, n);
	CHECK(k <= n);
	for (i = 0; i < k; i++)
		for (size_t j = i + 1; j < k; j++)
			CHECK(w[i].rank != w[j].rank);
	free(s);
	free(w);
	free(w2);
	return 0;
}
