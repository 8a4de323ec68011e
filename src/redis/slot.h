/*
 * slot.h — Redis Cluster's key slot, as the cluster computes it.
 */
#ifndef SLUICE_REDIS_SLOT_H
#define SLUICE_REDIS_SLOT_H

#include <stddef.h>

/* CRC16 (XMODEM) of the key, or of its {hash tag} when it has a non-empty
   one, modulo 16384. */
unsigned rc_key_slot(const char *key, size_t len);

#endif /* SLUICE_REDIS_SLOT_H */
