/*
 * tools/check/engine.h - the engine model around the transfer core (engine.c):
 * staging regions, the staging pool registry, actions turned into
 * messages, shutdown.
 */
#ifndef XFER_CHECK_ENGINE_H
#define XFER_CHECK_ENGINE_H

#include "world.h"

/* The producer starts: the staging pool is registered (fsm/life.h). */
void ck_engine_start(ck_world *w);
/* Submit transfer tr (index, id tr + 1); the core's return code. */
int ck_engine_submit(ck_world *w, unsigned tr);
/* The engine shuts down (the shutdown move): the registry stops, the core
 * is told, its actions are drained. */
void ck_engine_shutdown(ck_world *w);
/* Act on every action the core produced since the last drain. */
void ck_engine_drain(ck_world *w);

#endif /* XFER_CHECK_ENGINE_H */
