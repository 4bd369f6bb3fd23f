"""ATS's caching-policy keys and cache.config (issue 18, policy).

One test per records.config key that changes what is cached or how, each
against a real origin (t/origin.py): the origin's request log tells a hit
from a fetch, Cache-Status says why.  Each test would fail with the key
ignored (Cistern's behaviour before issue 18, or its default).  Then
cache.config: never-cache and ttl-in-cache rules, following reloads, and a
bad line failing `cistern -t` with file:line.
"""

import time

import harness
from harness import Cistern, Origin, expect, expect_eq, expect_in, is_hit

HOST = "p.test"
CC60 = "headers?Cache-Control=max-age%3D60"


def remap_for(o):
    return ["map http://%s/ http://%s/" % (HOST, o.authority)]


def get(c, path, headers=(), host=HOST):
    r = harness.one_request(c.port, "GET", path, None, list(headers), host)
    expect(r is not None, "GET %s: no complete response" % path)
    return r


def fetched(o, path):
    """How many requests for path reached the origin."""
    return len([x for x in o.requests() if x["target"] == path])


def cistern(o, records=None, files=None):
    return Cistern(storage=["cache 64M"], remap=remap_for(o),
                   records=records or {}, files=files or {})


def cached_twice(c, o, path, headers=(), headers2=None):
    """GET path twice; returns (second response, origin fetches)."""
    get(c, path, headers)
    r = get(c, path, headers if headers2 is None else headers2)
    return r, fetched(o, path)


# ---------------------------------------------------------------------------
# records.config

def test_cache_http_off():
    """proxy.config.http.cache.http 0: proxy only, never looked up or
    stored (ATS: the cache is off)."""
    with Origin() as o, cistern(o, {"proxy.config.http.cache.http": 0}) as c:
        p = "/off/" + CC60
        r, n = cached_twice(c, o, p)
        expect_eq(n, 2, "origin fetches with the cache off")
        expect(not is_hit(r), "a hit with the cache off")
        expect_in("fwd=bypass", r.header("Cache-Status", ""), "Cache-Status")


def test_cookies_0_keeps_cookie_requests_out():
    """cache_responses_to_cookies 0: a response to a request with Cookie is
    not stored, and a request with Cookie takes nothing from the cache."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.cache_responses_to_cookies": 0}) as c:
        p = "/ck0/" + CC60
        r, n = cached_twice(c, o, p, [("Cookie", "a=1")], [])
        expect_eq(n, 2, "fetches: the answer to a Cookie request was stored")
        r = get(c, p)
        expect(is_hit(r), "a request without Cookie misses a stored object")
        get(c, p, [("Cookie", "a=1")])
        expect_eq(fetched(o, p), 3, "a Cookie request was answered from the cache")


def test_cookies_2_images_only():
    """cache_responses_to_cookies 2: with cookies, only image types."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.cache_responses_to_cookies": 2}) as c:
        for path, ctype, want in (("/img", "image/png", 1), ("/txt", "text/html", 2)):
            o.script(path, [{"status": 200, "body": "x" * 10, "headers": [
                ["Content-Type", ctype], ["Cache-Control", "max-age=60"]]}])
            _, n = cached_twice(c, o, path, [("Cookie", "s=1")])
            expect_eq(n, want, "fetches of %s with Cookie" % ctype)


def test_cookies_4_text_without_set_cookie():
    """cache_responses_to_cookies 4: text is stored for a Cookie request
    when the response sets no cookie (3 would not store it)."""
    for mode, want in ((4, 1), (3, 2)):
        with Origin() as o, cistern(o, {
                "proxy.config.http.cache.cache_responses_to_cookies": mode}) as c:
            o.script("/t", [{"status": 200, "body": "text", "headers": [
                ["Content-Type", "text/plain"], ["Cache-Control", "max-age=60"]]}])
            _, n = cached_twice(c, o, "/t", [("Cookie", "s=1")])
            expect_eq(n, want, "fetches under cache_responses_to_cookies %d" % mode)


def test_set_cookie_never_shared():
    """cache_responses_to_cookies 1 (ATS would store Set-Cookie with the
    object): Cistern stores it without Set-Cookie when
    proxy.config.cistern.cache.set_cookie is 1, not at all when 0."""
    for sc, want in ((1, 1), (0, 2)):
        with Origin() as o, cistern(o, {
                "proxy.config.http.cache.cache_responses_to_cookies": 1,
                "proxy.config.cistern.cache.set_cookie": sc}) as c:
            o.script("/sc", [{"status": 200, "body": "b", "headers": [
                ["Set-Cookie", "id=secret"], ["Cache-Control", "max-age=60"]]}])
            r, n = cached_twice(c, o, "/sc")
            expect_eq(n, want, "fetches with set_cookie %d" % sc)
            if n == 1:
                expect_eq(r.header("Set-Cookie"), None, "Set-Cookie served from the cache")


def test_ignore_client_cc_max_age():
    """ignore_client_cc_max_age 1 (ATS's default; Cistern's is 0): a
    client's max-age=0 does not force a validation."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.ignore_client_cc_max_age": 1}) as c:
        p = "/cma/" + CC60
        r, n = cached_twice(c, o, p, [], [("Cache-Control", "max-age=0")])
        expect_eq(n, 1, "fetches: the client's max-age was honoured")
        expect(is_hit(r), "not a hit")


def test_ignore_client_no_cache():
    """ignore_client_no_cache 1 (ATS's default; Cistern's is 0): a client's
    no-cache, Pragma: no-cache and no-store are ignored."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.ignore_client_no_cache": 1}) as c:
        p = "/cnc/" + CC60
        get(c, p, [("Cache-Control", "no-store")])
        r = get(c, p, [("Cache-Control", "no-cache")])
        expect(is_hit(r), "no-cache request not answered from the cache")
        r = get(c, p, [("Pragma", "no-cache")])
        expect(is_hit(r), "Pragma: no-cache request not answered from the cache")
        expect_eq(fetched(o, p), 1, "origin fetches")


def test_client_no_cache_honoured_by_default():
    """Cistern's default (0): a client's no-cache revalidates."""
    with Origin() as o, cistern(o) as c:
        p = "/cnc0/" + CC60
        _, n = cached_twice(c, o, p, [], [("Cache-Control", "no-cache")])
        expect_eq(n, 2, "origin fetches")


def test_ignore_server_no_cache():
    """ignore_server_no_cache 1: an origin's no-store and no-cache are
    ignored (stored, and served without validation)."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.ignore_server_no_cache": 1}) as c:
        for cc in ("no-store, max-age=60", "no-cache, max-age=60"):
            p = "/snc/headers?Cache-Control=" + cc.replace(" ", "%20").replace(
                ",", "%2C").replace("=", "%3D")
            r, n = cached_twice(c, o, p)
            expect_eq(n, 1, "fetches of %r" % cc)
            expect(is_hit(r), "%r: not a hit" % cc)


def test_www_authenticate_not_stored():
    """ignore_authentication 0 (the default, ATS's): a response with
    WWW-Authenticate is not stored."""
    with Origin() as o, cistern(o) as c:
        o.script("/wa", [{"status": 200, "body": "x", "headers": [
            ["WWW-Authenticate", "Basic realm=x"], ["Cache-Control", "max-age=60"]]}])
        r, n = cached_twice(c, o, "/wa")
        expect_eq(n, 2, "fetches")
        expect_in("detail=www-authenticate", r.header("Cache-Status", ""), "Cache-Status")


def test_ignore_authentication():
    """ignore_authentication 1: WWW-Authenticate and the request's
    Authorization no longer keep a response out."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.ignore_authentication": 1}) as c:
        o.script("/wa", [{"status": 200, "body": "x", "headers": [
            ["WWW-Authenticate", "Basic realm=x"], ["Cache-Control", "max-age=60"]]}])
        _, n = cached_twice(c, o, "/wa")
        expect_eq(n, 1, "fetches with WWW-Authenticate")
        p = "/au/" + CC60
        _, n = cached_twice(c, o, p, [("Authorization", "Basic eDp5")])
        expect_eq(n, 1, "fetches with Authorization")


def test_when_to_revalidate():
    """when_to_revalidate: 2 always validates; 3 never goes stale; 1
    validates what a heuristic made fresh; 4 validates when the request has
    If-Modified-Since."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.when_to_revalidate": 2}) as c:
        p = "/wtr2/etag/a/" + CC60
        _, n = cached_twice(c, o, p)
        expect_eq(n, 2, "2: origin requests")
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.when_to_revalidate": 3}) as c:
        p = "/wtr3/headers?Cache-Control=max-age%3D1"
        get(c, p)
        time.sleep(2.2)
        r = get(c, p)
        expect_eq(fetched(o, p), 1, "3: origin requests after expiry")
        expect(is_hit(r), "3: not a hit")
    lm = int(time.time()) - 100 * 86400
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.when_to_revalidate": 1}) as c:
        p = "/wtr1/last-modified/%d" % lm
        _, n = cached_twice(c, o, p)
        expect_eq(n, 2, "1: heuristic freshness not validated")
        p = "/wtr1/" + CC60
        _, n = cached_twice(c, o, p)
        expect_eq(n, 1, "1: explicit freshness validated")
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.when_to_revalidate": 4}) as c:
        p = "/wtr4/" + CC60
        _, n = cached_twice(c, o, p)
        expect_eq(n, 1, "4: plain request validated")
        get(c, p, [("If-Modified-Since", "Thu, 01 Jan 2015 00:00:00 GMT")])
        expect_eq(fetched(o, p), 2, "4: If-Modified-Since not validated")


def test_max_stale_age():
    """max_stale_age bounds stale answers: stale-if-error=3600 does not
    serve a copy more stale than max_stale_age."""
    for msa, want in ((1, 500), (600, 200)):
        with Origin() as o, cistern(o, {
                "proxy.config.http.cache.max_stale_age": msa}) as c:
            o.script("/se", [{"status": 200, "body": "good", "headers": [
                ["Cache-Control", "max-age=1, stale-if-error=3600"]]},
                {"status": 500, "body": "bad"}])
            get(c, "/se")
            time.sleep(3.2)
            r = get(c, "/se")
            expect_eq(r.status, want, "status with max_stale_age %d" % msa)


def test_negative_revalidating():
    """negative_revalidating_enabled 1 (ATS's default; Cistern's is 0, as
    RFC 9111 4.2.4 wants): a stale object whose revalidation gets a 503
    (or no connection) is served stale instead, even with negative caching
    on (the 503 does not replace it), within max_stale_age; 0: the 503
    passes through."""
    for nr, want in ((0, 503), (1, 200)):
        with Origin() as o, cistern(o, {
                "proxy.config.http.negative_revalidating_enabled": nr,
                "proxy.config.http.negative_caching_enabled": 1}) as c:
            o.script("/nr", [{"status": 200, "body": "good", "headers": [
                ["Cache-Control", "max-age=1"]]},
                {"status": 503, "body": "bad"}, {"status": 503, "body": "bad"}])
            get(c, "/nr")
            time.sleep(2.2)
            r = get(c, "/nr")
            expect_eq(r.status, want, "status with negative_revalidating %d"
                      % nr)
            if nr:
                expect_eq(r.body, b"good", "the stale body")
                r = get(c, "/nr")
                expect_eq((r.status, r.body), (200, b"good"),
                          "after the failed revalidation (the 503 was "
                          "not stored in its place)")


def test_guaranteed_min_lifetime():
    """guaranteed_min_lifetime: max-age=0 is fresh for that long."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.guaranteed_min_lifetime": 60}) as c:
        p = "/gmin/etag/x/headers?Cache-Control=max-age%3D0"
        r, n = cached_twice(c, o, p)
        expect_eq(n, 1, "origin requests")
        expect(is_hit(r), "not a hit")


def test_guaranteed_max_lifetime():
    """guaranteed_max_lifetime: max-age=3600 is fresh for 1 s only."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.cache.guaranteed_max_lifetime": 1}) as c:
        p = "/gmax/etag/x/headers?Cache-Control=max-age%3D3600"
        get(c, p)
        time.sleep(2.2)
        get(c, p)
        expect_eq(fetched(o, p), 2, "origin requests after 2 s")


def test_negative_caching():
    """negative_caching_enabled 1: a listed status without freshness is
    stored for negative_caching_lifetime; one not listed is not."""
    with Origin() as o, cistern(o, {
            "proxy.config.http.negative_caching_enabled": 1,
            "proxy.config.http.negative_caching_lifetime": 2,
            "proxy.config.http.negative_caching_list": "404 502"}) as c:
        p = "/neg/status/404"
        r, n = cached_twice(c, o, p)
        expect_eq(r.status, 404, "status")
        expect_eq(n, 1, "404 fetches")
        expect(is_hit(r), "404 not a hit")
        time.sleep(3.2)
        get(c, p)
        expect_eq(fetched(o, p), 2, "404 fetches after its lifetime")
        p = "/neg/status/503"
        _, n = cached_twice(c, o, p)
        expect_eq(n, 2, "503 (not listed) fetches")


def test_negative_caching_off_by_default():
    """Without negative caching a 404 without freshness is not stored."""
    with Origin() as o, cistern(o) as c:
        _, n = cached_twice(c, o, "/neg/status/404")
        expect_eq(n, 2, "404 fetches")


# ---------------------------------------------------------------------------
# cache.config

def test_cache_config_never_cache_follows_reload():
    """A reload that adds a never-cache rule stops lookups and stores for
    the URLs it names at once; removing it brings the stored copy back."""
    with Origin() as o, cistern(o) as c:
        p = "/nc/" + CC60
        _, n = cached_twice(c, o, p)
        expect_eq(n, 1, "fetches before the rule")
        c.write_file("cache.config", ["dest_domain=127.0.0.1 prefix=/nc action=never-cache"])
        c.reload(wait_log=r"reload ok")
        r = get(c, p)
        expect(not is_hit(r), "hit under never-cache")
        expect_eq(fetched(o, p), 2, "fetches under never-cache")
        other = "/other/" + CC60
        _, n = cached_twice(c, o, other)
        expect_eq(n, 1, "a URL the rule does not name")
        c.write_file("cache.config", ["# nothing"])
        c.reload(wait_log=r"reload ok")
        r = get(c, p)
        expect(is_hit(r), "the stored copy after the rule went")


def test_cache_config_ttl_in_cache_follows_reload():
    """ttl-in-cache stores what no-store would keep out, for that long;
    added by a reload."""
    with Origin() as o, cistern(o) as c:
        p = "/t/x.js"
        o.script(p, [{"status": 200, "body": "js", "headers": [
            ["Cache-Control", "no-store"], ["Content-Type", "text/javascript"]]}])
        _, n = cached_twice(c, o, p)
        expect_eq(n, 2, "fetches before the rule")
        c.write_file("cache.config", [
            "dest_domain=127.0.0.1 suffix=.js ttl-in-cache=2s",
            "dest_domain=127.0.0.1 suffix=.js action=never-cache"])
        c.reload(wait_log=r"reload ok")
        r, n = cached_twice(c, o, p)
        expect_eq(n, 3, "fetches under ttl-in-cache (it beats never-cache)")
        expect(is_hit(r), "not a hit under ttl-in-cache")
        time.sleep(3.2)
        get(c, p)
        expect_eq(fetched(o, p), 4, "fetches after the ttl")


def test_cache_config_revalidate():
    """revalidate=4s: a max-age=3600 object is validated after 4 s (and
    not within them: generous for a loaded sanitizer build)."""
    with Origin() as o, cistern(o, files={
            "cache.config": "url_regex=/rv/ revalidate=4s\n"}) as c:
        p = "/rv/etag/q/headers?Cache-Control=max-age%3D3600"
        r, n = cached_twice(c, o, p)
        expect_eq(n, 1, "fetches within 4 s")
        time.sleep(5.2)
        get(c, p)
        expect_eq(fetched(o, p), 2, "fetches after revalidate=4s")


def test_cache_config_errors_fail_closed():
    """What cache.config asks and Cistern cannot do fails `cistern -t`
    with file:line."""
    r = harness.check_config(remap=["map http://a.test/ http://127.0.0.1:9/"], files={
        "cache.config": "dest_domain=a.test action=never-cache\n"
                        "dest_ip=10.0.0.1 action=never-cache\n"
                        "dest_domain=a.test pin-in-cache=1d\n"})
    expect(r.rc != 0, "cistern -t accepted it")
    expect_in("cache.config:2: dest_ip=10.0.0.1: not supported", r.stderr, "stderr")
    expect_in("cache.config:3: pin-in-cache=1d: not supported", r.stderr, "stderr")
    r = harness.check_config(remap=["map http://a.test/ http://127.0.0.1:9/"], records={
        "proxy.config.http.negative_caching_list": "404 x"})
    expect(r.rc != 0, "a bad negative_caching_list was accepted")


if __name__ == "__main__":
    harness.main()
