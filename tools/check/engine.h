/*
 * tools/check/engine.h - the engine model around the transfer core (engine.c):
 * staging regions, the staging pool registry, actions turned into
 * messages, shutdown.
 */
#ifndef XFER_CHECK_ENGINE_H
#define XFER_CHECK_ENGINE_H

#include "world.h"

/* The producer starts: the staging pool is registered. */
void ck_engine_start(ck_world *w);
/* Submit transfer tr (index, id tr + 1); the core's return code. */
int ck_engine_submit(ck_world *w, unsigned tr);
/* Act on every action the core produced since the last drain. */
void ck_engine_drain(ck_world *w);

#endif /* XFER_CHECK_ENGINE_H */
