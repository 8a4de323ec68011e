/*
 * memory.h — the memory backend: per-key state in this daemon's own store
 * (the library's sl_store), decided at once. The default backend, and the
 * one every daemon without --store runs.
 */
#ifndef SLUICE_ENGINE_MEMORY_H
#define SLUICE_ENGINE_MEMORY_H

#include "backend.h"

/* The memory backend (stateless: one for every engine). */
eng_backend *memory_backend(void);

#endif /* SLUICE_ENGINE_MEMORY_H */
