/*
 * mem.c - memory kinds (xfer/mem.h): which kinds this process can
 * register, and what kind a pointer is.
 *
 * What must stay true: nothing here reads the memory it is asked about;
 * the CUDA driver is asked only through cuda_drv.c's loaded table.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"
#include "testdev_int.h"
#include "xfer/mem.h"

int xfer_mem_available(xfer_mem m)
{
    switch (m.kind) {
    case XFER_MEM_HOST:
    case XFER_MEM_TESTDEV:
        return m.device == 0 ? 0 : XFER_ERR_INVALID_ARG;
    case XFER_MEM_CUDA: {
        if (m.device < 0)
            return XFER_ERR_INVALID_ARG;
        const xfer_cuda_api *a = xfer_cuda_get();
        return a && m.device < a->ndevices ? 0 : XFER_ERR_NOT_SUPPORTED;
    }
    }
    return XFER_ERR_INVALID_ARG;
}

xfer_mem xfer_mem_of(const void *ptr)
{
    xfer_mem m = {.kind = XFER_MEM_HOST, .device = 0};
    if (!ptr)
        return m;
    if (xfer_testdev_contains(ptr, 0)) {
        m.kind = XFER_MEM_TESTDEV;
        return m;
    }
    const xfer_cuda_api *a = xfer_cuda_get();
    unsigned type = 0;
    int ord = 0;
    xfer_cu_ptr p = (xfer_cu_ptr)(uintptr_t)ptr;
    if (a &&
        a->PointerGetAttribute(&type, XFER_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                               p) == 0 &&
        type == XFER_CU_MEMORYTYPE_DEVICE &&
        a->PointerGetAttribute(&ord, XFER_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                               p) == 0) {
        m.kind = XFER_MEM_CUDA;
        m.device = ord;
    }
    return m;
}

const char *xfer_mem_kind_name(xfer_mem_kind k)
{
    switch (k) {
    case XFER_MEM_HOST:
        return "host";
    case XFER_MEM_CUDA:
        return "cuda";
    case XFER_MEM_TESTDEV:
        return "testdev";
    }
    return "unknown";
}

int xfer_mem_parse(const char *text, xfer_mem *out)
{
    if (!text || !out)
        return XFER_ERR_INVALID_ARG;
    xfer_mem m = {.kind = XFER_MEM_HOST, .device = 0};
    int rc = 0;
    if (strcmp(text, "host") == 0) {
        m.kind = XFER_MEM_HOST;
    } else if (strcmp(text, "testdev") == 0) {
        m.kind = XFER_MEM_TESTDEV;
    } else if (strcmp(text, "cuda") == 0) {
        m.kind = XFER_MEM_CUDA;
    } else if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' &&
               text[5] <= '9' && strlen(text + 5) <= 4) {
        char *end = NULL;
        long n = strtol(text + 5, &end, 10);
        if (*end || n > 1023)
            rc = XFER_ERR_INVALID_ARG;
        m.kind = XFER_MEM_CUDA;
        m.device = (int32_t)n;
    } else {
        rc = XFER_ERR_INVALID_ARG;
    }
    if (rc == 0)
        *out = m;
    return rc;
}
