/*
 * t/seeds/push_gen.c: the PUSH generator of the ATS PR 7382 benchmark, as
 * its author used it: prints one PUSH request whose body is a whole HTTP
 * response (a text body, no Cache-Control), to be piped into `nc HOST PORT`.
 *
 *     push_gen [URL [BODY_BYTES]]    default http://fakehost/fake 65536
 *
 * The body is printable and changes letter every 64-byte line, so a
 * block out of place is visible in a comparison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "http://fakehost/fake";
    long        n = argc > 2 ? strtol(argv[2], NULL, 10) : 65536;
    char        head[256];
    int         hl;
    char       *body;

    if (n < 0 || n > (1L << 30)) {
        fprintf(stderr, "push_gen: body size out of range\n");
        return 2;
    }
    body = malloc((size_t)n + 1);
    if (body == NULL)
        return 1;
    for (long i = 0; i < n; i++)
        body[i] = (char)('a' + (i / 64) % 26);
    for (long i = 63; i < n; i += 64)
        body[i] = '\n';
    hl = snprintf(head, sizeof(head),
                  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                  "Content-Length: %ld\r\n\r\n", n);
    printf("PUSH %s HTTP/1.1\r\nContent-Length: %ld\r\n\r\n", url,
           (long)hl + n);
    fwrite(head, 1, (size_t)hl, stdout);
    fwrite(body, 1, (size_t)n, stdout);
    free(body);
    return fflush(stdout) == 0 ? 0 : 1;
}
