/*
 * pb_json.h — protobuf messages (protobuf-c's, any descriptor) to and from
 * JSON, as protobuf's canonical proto3 JSON mapping spells them (Go's
 * protojson, which envoyproxy/ratelimit's /json endpoint uses): field
 * names in lowerCamelCase (the .proto names accepted too), enums by name,
 * 64-bit integers as strings, google.protobuf.Duration as "1.5s", the
 * wrapper types as their bare value, fields at their default left out.
 * It knows nothing of rate limits; http_rls.c uses it for envoy's
 * RateLimitRequest and RateLimitResponse.
 */
#ifndef SLUICE_SERVER_PB_JSON_H
#define SLUICE_SERVER_PB_JSON_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/*
 * The message of type d that JSON value v spells, or NULL with err saying
 * what is wrong and where ("descriptors[0].entries[1].key: not a
 * string"): a field the type does not have, a value of the wrong JSON
 * type, a number out of its field's range, an enum name the type does not
 * define, a bad duration or base64 text. Nesting deeper than 32 messages
 * is refused. Free the message with protobuf_c_message_free_unpacked(m,
 * NULL).
 */
ProtobufCMessage *pbj_decode(const ProtobufCMessageDescriptor *d,
                             const json_t *v, char *err, size_t err_len);

/* m as a JSON object (a new reference), or NULL out of memory. */
json_t *pbj_encode(const ProtobufCMessage *m);

#endif /* SLUICE_SERVER_PB_JSON_H */
