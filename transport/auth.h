/*
 * transport/auth.h - the shared-secret challenge-response of HELLO2
 * (transport/wire.h, "Sessions and authentication"), and the OS random
 * bytes behind session identities, nonces and reservation ids.
 *
 * The MAC is HMAC-SHA256 from OpenSSL's libcrypto and proofs are compared
 * with CRYPTO_memcmp (constant time); random bytes from RAND_bytes (OpenSSL's
 * DRBG, seeded from the kernel's CSPRNG).  Nothing here is hand-written cryptography.
 */
#ifndef XFER_AUTH_H
#define XFER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define XFER_AUTH_SECRET_MAX 256u /* bytes of a shared secret */
#define XFER_AUTH_SECRET_MIN 16u

/* Fill buf with n bytes from the OS CSPRNG.  Errors: XFER_ERR_IO. */
int xfer_auth_random(void *buf, size_t n);
/* Draws from the OS CSPRNG taken a batch at a time: one RAND_bytes call
 * (and its fork check) per XFER_AUTH_RNG_BATCH ids instead of per id.  A
 * drawn value is wiped from the batch when it is handed out.  Owned by one
 * thread; a process that forks must not use it on both sides. */
#define XFER_AUTH_RNG_BATCH 64u
typedef struct xfer_auth_rng {
    uint64_t v[XFER_AUTH_RNG_BATCH];
    unsigned left; /* undrawn values at the front of v */
} xfer_auth_rng;

/* One 64-bit draw from the OS CSPRNG, never 0 (an xfer_rng's next).  ud:
 * an xfer_auth_rng (zeroed to start) to draw in batches, or NULL for one
 * RAND_bytes call per draw.  Call xfer_auth_random once first to know the
 * OS can. */
uint64_t xfer_auth_rng_next(void *ud);

/* The proof of one side: HMAC-SHA256(secret, label || the HELLO2 body
 * fields (role, group, shard, session, client nonce) || server nonce).
 * server: the server's label ("xfer-s"), else the client's ("xfer-c"). */
void xfer_auth_proof(const uint8_t *secret, size_t secret_len, bool server,
                     const xfer_wire_msg *hello,
                     const uint8_t snonce[XFER_WIRE_NONCE],
                     uint8_t out[XFER_WIRE_MAC]);
/* Constant-time: the proof `got` equals `want`. */
bool xfer_auth_equal(const uint8_t got[XFER_WIRE_MAC],
                     const uint8_t want[XFER_WIRE_MAC]);

/* The client's side.  Fill *m with a HELLO2 for (role, group, shard) of
 * session `session` and a fresh nonce.  Errors: XFER_ERR_IO (no random
 * bytes). */
int xfer_auth_hello(xfer_wire_msg *m, uint8_t role, uint32_t group,
                    uint16_t shard, const uint8_t session[XFER_WIRE_SESSION]);
/* The server's CHALLENGE `ch` to our HELLO2 `hello`: check its proof and
 * write our AUTH into *auth.  Errors: XFER_ERR_AUTH (we have no secret, or
 * the server's proof is wrong: it does not know the secret). */
int xfer_auth_answer(const uint8_t *secret, size_t secret_len,
                     const xfer_wire_msg *hello, const xfer_wire_msg *ch,
                     xfer_wire_msg *auth);
/* A client config's secret and session copied in: the secret when set
 * (16..256 bytes, else XFER_ERR_INVALID_ARG), and the session, or one
 * drawn from the CSPRNG when `session` is all zero (XFER_ERR_IO when none
 * can be). */
int xfer_auth_client_init(const uint8_t *secret, size_t secret_len,
                          const uint8_t session[XFER_WIRE_SESSION],
                          uint8_t secret_out[XFER_AUTH_SECRET_MAX],
                          size_t *secret_len_out,
                          uint8_t session_out[XFER_WIRE_SESSION]);

#endif /* XFER_AUTH_H */
