/*
 * transport/auth.c - HELLO2's proofs and the OS random bytes
 * (transport/auth.h).
 *
 * What must stay true: the MAC and the compare are libcrypto's; the input
 * of a proof is laid out field by field in a fixed order (never a struct
 * image), so both ends hash the same bytes; random bytes that the kernel
 * cannot give are an error, never a weaker fallback.
 */
#include "auth.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "le.h" /* fsm_private_dep: the one little-endian codec */
#include "xfer/errors.h"
#include "xfer/xfer.h" /* xfer_id_keyed */

int xfer_auth_random(void *buf, size_t n)
{
    /* OpenSSL's DRBG, seeded and reseeded from the kernel (getrandom). */
    return n <= INT32_MAX && RAND_bytes(buf, (int)n) == 1 ? 0 : XFER_ERR_IO;
}

uint64_t xfer_auth_rng_next(void *ud)
{
    xfer_auth_rng *r = ud;
    uint64_t v = 0;
    /* RAND_bytes fails only when the DRBG cannot be seeded, which the
     * server's constructor rules out by drawing once itself. */
    while (v == 0) {
        if (!r) {
            (void)xfer_auth_random(&v, sizeof v);
            continue;
        }
        if (r->left == 0 && xfer_auth_random(r->v, sizeof r->v) == 0)
            r->left = XFER_AUTH_RNG_BATCH;
        if (r->left) {
            v = r->v[--r->left];
            r->v[r->left] = 0; /* a handed-out id stays only with its owner */
        }
    }
    return v;
}

void xfer_auth_proof(const uint8_t *secret, size_t secret_len, bool server,
                     const xfer_wire_msg *hello,
                     const uint8_t snonce[XFER_WIRE_NONCE],
                     uint8_t out[XFER_WIRE_MAC])
{
    uint8_t in[8 + 1 + 4 + 2 + XFER_WIRE_SESSION + 2 * XFER_WIRE_NONCE];
    xfer_le_enc w = xfer_le_enc_start(in, sizeof in);
    const char *label = server ? "xfer-s\0\0" : "xfer-c\0\0";
    for (int i = 0; i < 8; i++)
        xfer_le_enc_u8(&w, (uint8_t)label[i]);
    xfer_le_enc_u8(&w, hello->role);
    xfer_le_enc_u32(&w, hello->group);
    xfer_le_enc_u16(&w, hello->shard);
    for (size_t i = 0; i < XFER_WIRE_SESSION; i++)
        xfer_le_enc_u8(&w, hello->session[i]);
    for (size_t i = 0; i < XFER_WIRE_NONCE; i++)
        xfer_le_enc_u8(&w, hello->nonce[i]);
    for (size_t i = 0; i < XFER_WIRE_NONCE; i++)
        xfer_le_enc_u8(&w, snonce[i]);
    unsigned int n = XFER_WIRE_MAC;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, in, sizeof in, out, &n))
        memset(out, 0, XFER_WIRE_MAC); /* never equal to a real proof */
}

int xfer_id_keyed(const void *key, size_t key_len, const void *name,
                  size_t name_len, uint64_t *out)
{
    static const char tag[] = "xfer-id"; /* apart from HELLO2's proofs */
    uint8_t in[sizeof tag + XFER_ID_NAME_MAX];
    if (!key || !out || key_len < 16 || key_len > 256 ||
        (!name && name_len) || name_len > XFER_ID_NAME_MAX)
        return XFER_ERR_INVALID_ARG;
    memcpy(in, tag, sizeof tag);
    if (name_len)
        memcpy(in + sizeof tag, name, name_len);
    uint8_t mac[32];
    unsigned int n = sizeof mac;
    if (!HMAC(EVP_sha256(), key, (int)key_len, in, sizeof tag + name_len, mac,
              &n))
        return XFER_ERR_INTERNAL;
    uint64_t v = xfer_le_get64(mac);
    *out = v ? v : 1; /* 0 is never an id */
    return 0;
}

bool xfer_auth_equal(const uint8_t got[XFER_WIRE_MAC],
                     const uint8_t want[XFER_WIRE_MAC])
{
    return CRYPTO_memcmp(got, want, XFER_WIRE_MAC) == 0;
}

int xfer_auth_hello(xfer_wire_msg *m, uint8_t role, uint32_t group,
                    uint16_t shard, const uint8_t session[XFER_WIRE_SESSION])
{
    *m = (xfer_wire_msg){.type = XFER_WIRE_T_HELLO2, .version = 2,
                         .role = role, .group = group, .shard = shard};
    memcpy(m->session, session, XFER_WIRE_SESSION);
    return xfer_auth_random(m->nonce, sizeof m->nonce);
}

int xfer_auth_answer(const uint8_t *secret, size_t secret_len,
                     const xfer_wire_msg *hello, const xfer_wire_msg *ch,
                     xfer_wire_msg *auth)
{
    uint8_t want[XFER_WIRE_MAC];
    if (!secret_len)
        return XFER_ERR_AUTH;
    xfer_auth_proof(secret, secret_len, true, hello, ch->nonce, want);
    if (!xfer_auth_equal(ch->mac, want))
        return XFER_ERR_AUTH;
    *auth = (xfer_wire_msg){.type = XFER_WIRE_T_AUTH};
    xfer_auth_proof(secret, secret_len, false, hello, ch->nonce, auth->mac);
    return 0;
}

int xfer_auth_client_init(const uint8_t *secret, size_t secret_len,
                          const uint8_t session[XFER_WIRE_SESSION],
                          uint8_t secret_out[XFER_AUTH_SECRET_MAX],
                          size_t *secret_len_out,
                          uint8_t session_out[XFER_WIRE_SESSION])
{
    *secret_len_out = 0;
    if (secret) {
        if (secret_len < XFER_AUTH_SECRET_MIN ||
            secret_len > XFER_AUTH_SECRET_MAX)
            return XFER_ERR_INVALID_ARG;
        memcpy(secret_out, secret, secret_len);
        *secret_len_out = secret_len;
    }
    static const uint8_t zero[XFER_WIRE_SESSION];
    if (memcmp(session, zero, sizeof zero) != 0) {
        memcpy(session_out, session, XFER_WIRE_SESSION);
        return 0;
    }
    return xfer_auth_random(session_out, XFER_WIRE_SESSION);
}
