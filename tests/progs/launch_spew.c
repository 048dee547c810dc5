/* launch_spew: print LINES lines of LEN bytes as fast as possible, each line
 * "<rank>:<i>:" followed by a letter repeated up to LEN and '\n', written in
 * pieces (a line spans several write() calls, the way a program that prints
 * a line in parts does), so that only a launcher that keeps lines whole
 * produces clean output.   launch_spew LINES LEN [stdout|stderr] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			exit(3);
		p += w;
		n -= (size_t)w;
	}
}

int main(int argc, char **argv)
{
	const char *rank = getenv("RANK");
	int lines, len, fd, i;
	char *buf;

	if (argc < 3 || rank == NULL)
		return 2;
	lines = atoi(argv[1]);
	len = atoi(argv[2]);
	fd = argc > 3 && strcmp(argv[3], "stderr") == 0 ? 2 : 1;
	buf = malloc((size_t)len + 64);
	if (buf == NULL)
		return 2;
	for (i = 0; i < lines; i++) {
		int h = snprintf(buf, 64, "%s:%d:", rank, i);
		int n = h < len ? len : h, cut1, cut2;

		memset(buf + h, 'a' + atoi(rank) % 26, (size_t)(n - h));
		buf[n] = '\n';
		/* Three pieces: the head, most of the body, the tail and newline. */
		cut1 = h;
		cut2 = h + (n - h) / 2;
		put(fd, buf, (size_t)cut1);
		put(fd, buf + cut1, (size_t)(cut2 - cut1));
		put(fd, buf + cut2, (size_t)(n + 1 - cut2));
	}
	free(buf);
	return 0;
}
