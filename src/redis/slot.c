/*
 * slot.c — Redis Cluster's key slot (the cluster spec's keyHashSlot).
 */
#include "slot.h"

#include <stdint.h>
#include <string.h>

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, no reflection. */
static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)((uint8_t)buf[i] << 8);
    for (int b = 0; b < 8; b++)
      crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

unsigned rc_key_slot(const char *key, size_t len) {
  /* The first '{', and the first '}' after it, with something between. */
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open + 1 - key);
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1)
      return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
  }
  return crc16(key, len) & 16383;
}
