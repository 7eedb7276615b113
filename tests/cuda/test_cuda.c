/*
 * tests/cuda/test_cuda.c - the suite `cuda`: device memory on a real GPU,
 * through the CUDA driver API (loaded with dlopen, tests/cuda/cu.c).  It
 * exits 77 with one line where there is no driver or no device (this
 * machine and CI), so it runs only where tools/run gpu-check carries it.
 *
 * Each test registers cuMemAlloc'd memory as the producer's staging, the
 * shards' pools, or both, moves transfers over TCP to 2 shard servers in
 * this process, and reads every shard's pool back with cuMemcpyDtoH to
 * find each transfer's bytes there.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "gpurig.h"
#include "testutil.h"

static cu_api cu;

#define SLICE (256u * 1024u)
#define COUNT 8u

static void move_and_verify(bool dev_staging, bool dev_pools)
{
    gpurig g = {.cu = &cu, .S = 2, .dev_pools = dev_pools,
                .dev_staging = dev_staging, .pool_len = 16u << 20,
                .staging_len = (size_t)SLICE * 2 * COUNT};
    char why[256] = "";
    int rc = gpurig_start(&g, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    uint8_t *pat = malloc(g.staging_len);
    ck_assert_ptr_nonnull(pat);
    for (size_t i = 0; i < g.staging_len; i++)
        pat[i] = (uint8_t)(i * 2654435761u >> 13);
    ck_assert_int_eq(gpurig_fill(&g, 0, pat, g.staging_len), 0);
    uint64_t id = 1;
    ck_assert_int_eq(gpurig_run(&g, &id, SLICE, COUNT, 4), 0);
    for (uint32_t t = 0; t < COUNT; t++)
        for (uint16_t k = 0; k < g.S; k++)
            ck_assert_msg(gpurig_holds(&g, k, pat + ((size_t)t * 2 + k) *
                                                     SLICE, SLICE),
                          "transfer %u shard %u not in the pool", t, k);
    free(pat);
    gpurig_stop(&g);
}

START_TEST(test_cuda_device_staging_to_host_pools)
{
    move_and_verify(true, false);
}
END_TEST

START_TEST(test_cuda_host_staging_to_device_pools)
{
    move_and_verify(false, true);
}
END_TEST

START_TEST(test_cuda_device_to_device_over_tcp)
{
    move_and_verify(true, true);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cuda_device_staging_to_host_pools);
    tcase_add_test(tc, test_cuda_host_staging_to_device_pools);
    tcase_add_test(tc, test_cuda_device_to_device_over_tcp);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char why[256];
    if (cu_open(&cu, why, sizeof why) != 0) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (!GPURIG_HAVE_MEM) {
        printf("SKIP: this build has no device memory kinds "
               "(include/xfer/mem.h)\n");
        return 77;
    }
    /* Check's fork mode would lose the CUDA context in the children. */
    setenv("CK_FORK", "no", 1);
    return tu_run(suite());
}
