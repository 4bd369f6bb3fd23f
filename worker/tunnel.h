/*
 * worker/tunnel.h: CONNECT tunnels and protocol upgrades (101): two
 * sockets relayed both ways (tunnel.c).
 *
 * A tunnel begins as a request's business (rq_tunnel): CONNECT's step
 * TUNNEL connects to the target (tunnel_connect), or the origin answers
 * 101 to an Upgrade the request forwarded (tunnel_from_origin).  Either
 * way the request's answer (200 or 101) is queued in rq_out and the
 * owner is told to flush; the owner then hands over its socket, the
 * bytes it still has for the client and those the client sent past the
 * head (tunnel_attach), and goes away.  From then on the tunnel owns the
 * request, and ends it (the access log line) when both directions are
 * done, on an error, or after the idle timeout.  See DESIGN.md.
 */
#ifndef CISTERN_TUNNEL_H
#define CISTERN_TUNNEL_H

struct req;
struct upstream;
struct buf;
struct worker;

/* CONNECT (the request's step TUNNEL): check it (not on TLS ports: 405;
 * remap_required 1: 403; a port outside proxy.config.http.connect_ports:
 * 403 with the reason) and start connecting to its authority.  Returns 0
 * (connecting, or connected already: rq_tunnel is set, the owner is
 * flushed when the answer is queued or has failed), or a status to answer
 * with, *why saying why (a refusal, or a target that failed at once).
 * A connect that fails later describes our answer (502, 504) in rq->syn
 * and calls answer(rq) (req.c's req_answer_ours), then the owner's flush. */
int  tunnel_connect(struct req *rq, void (*answer)(struct req *), const char **why);

/* Does rq ask for a protocol upgrade that is forwarded (a GET without a
 * body, HTTP/1.1, Upgrade listed in Connection, no h2c, not over TLS)? */
int  tunnel_upgrade_asked(const struct req *rq);
/* Append the Upgrade lines and "Connection: upgrade" to the head going to
 * the origin, when rq asks for an upgrade: 1 put, 0 none asked, -1 no
 * room. */
int  tunnel_put_upgrade(const struct req *rq, struct buf *o);
/* Does the origin's 101 resp name, in Upgrade, only protocols rq's
 * Upgrade listed, and at least one (RFC 9110 7.8)?  1 or 0. */
int  tunnel_upgrade_agreed(const struct req *rq, const struct http_req *resp);
/* The origin switched protocols: take up's socket and the bytes it sent
 * after the 101 head (up_in from start) into a tunnel for rq.  0, or -1
 * (out of memory: up is untouched). */
int  tunnel_from_origin(struct req *rq, struct upstream *up);

/* Is rq's tunnel connected, waiting for its owner to hand over? */
int  tunnel_ready(const struct req *rq);
/* The owner hands over: the client socket fd, its input (bytes past the
 * head, from start) and its unsent output; both buffers are taken (left
 * empty).  The tunnel owns rq from here (ends and frees it) and counts as
 * one of the worker's connections (nconns, conns_open); when it ends it
 * calls end(rq) (the owner's: DONE, then the request freed). */
void tunnel_attach(struct req *rq, int fd, struct buf *in, struct buf *out,
                   void (*end)(struct req *));
/* rq's owner goes away before the hand-over: stop connecting, close. */
void tunnel_abort(struct req *rq);
/* The worker's exit: close every tunnel. */
void tunnel_close_all(struct worker *w);

#endif /* CISTERN_TUNNEL_H */
