/*
 * conf/path.h: when a path segment climbs.  Shared by the request checker
 * (worker/http.c, which refuses or normalises what a client sends) and the
 * remap join (conf/remap.c, which must not glue a climbing segment onto a
 * to-path), so that the two can never disagree.  Header-only: the request
 * parser's fuzz target links nothing of conf/.
 */
#ifndef CISTERN_CONF_PATH_H
#define CISTERN_CONF_PATH_H

#include <stddef.h>

/* Is p[0..n) "." or "..", each dot written '.' or "%2e" in either case? */
static inline int
conf_path_is_dots(const char *p, size_t n)
{
    int dots = 0;

    for (size_t i = 0; i < n; dots++) {
        if (p[i] == '.')
            i++;
        else if (n - i >= 3 && p[i] == '%' && p[i + 1] == '2' && (p[i + 2] | 0x20) == 'e')
            i += 3;
        else
            return 0;
    }
    return dots == 1 || dots == 2;
}

/* Cut the segment seg[0..n) where an origin may cut it: at ';' (path
 * parameters, stripped by Tomcat, Jetty, Spring) and at an encoded slash,
 * backslash or semicolon (%2F, %5C, %3B, which some origins decode).
 * Returns 1 when one of the pieces is "." or ".."; *pieces is how many
 * there are (1: the segment was not cut). */
static inline int
conf_path_dot_piece(const char *seg, size_t n, int *pieces)
{
    size_t s = 0, i = 0, skip;
    int dots = 0;

    *pieces = 0;
    for (;;) {
        if (i == n)
            skip = 0;
        else if (seg[i] == ';')
            skip = 1;
        else if (seg[i] == '%' && n - i >= 3
                 && ((seg[i + 1] == '2' && (seg[i + 2] | 0x20) == 'f')
                     || (seg[i + 1] == '3' && (seg[i + 2] | 0x20) == 'b')
                     || (seg[i + 1] == '5' && (seg[i + 2] | 0x20) == 'c')))
            skip = 3;
        else {
            i++;
            continue;
        }
        (*pieces)++;
        dots |= conf_path_is_dots(seg + s, i - s);
        if (i == n)
            break;
        i += skip;
        s = i;
    }
    return dots;
}

#endif /* CISTERN_CONF_PATH_H */
