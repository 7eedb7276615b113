/*
 * tests/fuzz/replay_main.c - a main() for fuzz targets when libFuzzer is not
 * available (gcc builds): runs every file named on the command line (or
 * every file in a directory) through LLVMFuzzerTestOneInput once, so the
 * checked-in seed corpus is a regression test everywhere.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    if (!buf)
        return 1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return run_file(dir) == 0 ? (++*count, 0) : 1;
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bad |= run_file(path);
        ++*count;
    }
    closedir(d);
    return bad;
}

int main(int argc, char **argv)
{
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++)
        bad |= run_dir(argv[i], &count);
    printf("replay: %d inputs, %s\n", count, bad ? "errors" : "ok");
    return bad || count == 0;
}
