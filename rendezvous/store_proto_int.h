/* store_proto_int: the wire shape of every request, which store_proto.c (the
 * parser) reads by and store_proto_enc.c (the encoder) writes by, so that the
 * two cannot disagree. Not a public API. */
#ifndef DDP_STORE_PROTO_INT_H
#define DDP_STORE_PROTO_INT_H

#include <stdint.h>

#include "store_proto.h"

/* A request's fields after its opcode, in wire order, ending at F_END. */
enum store_field { F_END, F_U32, F_I64, F_KEY, F_VAL, F_VAL2, F_KEYLIST, F_KVLIST };

extern const uint8_t store_shapes[STORE_OP_COUNT_][4];

#endif
