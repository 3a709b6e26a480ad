/* The predefined datatypes (sizes) and the built-in reduction operations
 * over them, as MPI allows each pairing; anything else is MPI_ERR_OP. */
#define _GNU_SOURCE
#include "impl.h"

#include <complex.h>
#include <stdbool.h>
#include <wchar.h>

const int type_sizes[NTYPES] = {
    0, sizeof(char), sizeof(signed char), sizeof(unsigned char), 1, sizeof(short),
    sizeof(unsigned short), sizeof(int), sizeof(unsigned), sizeof(long), sizeof(unsigned long),
    sizeof(long long), sizeof(unsigned long long), sizeof(float), sizeof(double),
    sizeof(long double), sizeof(wchar_t), sizeof(bool), 1, 2, 4, 8, 1, 2, 4, 8,
    sizeof(float _Complex), sizeof(double _Complex), sizeof(MPI_Aint), sizeof(MPI_Offset),
    sizeof(MPI_Count), sizeof(struct pair_f), sizeof(struct pair_d), sizeof(struct pair_l),
    sizeof(struct pair_i), sizeof(struct pair_s), sizeof(struct pair_ld),
};

#define LOOP(T, STMT)                                                                     \
    do {                                                                                  \
        const T *a = in;                                                                  \
        T *b = inout;                                                                     \
        for (i = 0; i < n; i++) STMT;                                                     \
    } while (0)

/* Integers: every operation but the pair ones. */
#define INTEGER(T)                                                                        \
    switch (op) {                                                                         \
    case MPI_MAX: LOOP(T, if (a[i] > b[i]) b[i] = a[i]); return MPI_SUCCESS;             \
    case MPI_MIN: LOOP(T, if (a[i] < b[i]) b[i] = a[i]); return MPI_SUCCESS;             \
    case MPI_SUM: LOOP(T, b[i] = (T)(a[i] + b[i])); return MPI_SUCCESS;                  \
    case MPI_PROD: LOOP(T, b[i] = (T)(a[i] * b[i])); return MPI_SUCCESS;                 \
    case MPI_LAND: LOOP(T, b[i] = (T)(a[i] && b[i])); return MPI_SUCCESS;                \
    case MPI_LOR: LOOP(T, b[i] = (T)(a[i] || b[i])); return MPI_SUCCESS;                 \
    case MPI_LXOR: LOOP(T, b[i] = (T)(!a[i] != !b[i])); return MPI_SUCCESS;              \
    case MPI_BAND: LOOP(T, b[i] = (T)(a[i] & b[i])); return MPI_SUCCESS;                 \
    case MPI_BOR: LOOP(T, b[i] = (T)(a[i] | b[i])); return MPI_SUCCESS;                  \
    case MPI_BXOR: LOOP(T, b[i] = (T)(a[i] ^ b[i])); return MPI_SUCCESS;                 \
    default: return MPI_ERR_OP;                                                           \
    }

#define FLOATING(T)                                                                       \
    switch (op) {                                                                         \
    case MPI_MAX: LOOP(T, if (a[i] > b[i]) b[i] = a[i]); return MPI_SUCCESS;             \
    case MPI_MIN: LOOP(T, if (a[i] < b[i]) b[i] = a[i]); return MPI_SUCCESS;             \
    case MPI_SUM: LOOP(T, b[i] = a[i] + b[i]); return MPI_SUCCESS;                       \
    case MPI_PROD: LOOP(T, b[i] = a[i] * b[i]); return MPI_SUCCESS;                      \
    default: return MPI_ERR_OP;                                                           \
    }

#define COMPLEX(T)                                                                        \
    switch (op) {                                                                         \
    case MPI_SUM: LOOP(T, b[i] = a[i] + b[i]); return MPI_SUCCESS;                       \
    case MPI_PROD: LOOP(T, b[i] = a[i] * b[i]); return MPI_SUCCESS;                      \
    default: return MPI_ERR_OP;                                                           \
    }

#define LOGICAL(T)                                                                        \
    switch (op) {                                                                         \
    case MPI_LAND: LOOP(T, b[i] = a[i] && b[i]); return MPI_SUCCESS;                     \
    case MPI_LOR: LOOP(T, b[i] = a[i] || b[i]); return MPI_SUCCESS;                      \
    case MPI_LXOR: LOOP(T, b[i] = !a[i] != !b[i]); return MPI_SUCCESS;                   \
    default: return MPI_ERR_OP;                                                           \
    }

#define BYTES(T)                                                                          \
    switch (op) {                                                                         \
    case MPI_BAND: LOOP(T, b[i] = (T)(a[i] & b[i])); return MPI_SUCCESS;                 \
    case MPI_BOR: LOOP(T, b[i] = (T)(a[i] | b[i])); return MPI_SUCCESS;                  \
    case MPI_BXOR: LOOP(T, b[i] = (T)(a[i] ^ b[i])); return MPI_SUCCESS;                 \
    default: return MPI_ERR_OP;                                                           \
    }

/* MINLOC / MAXLOC: the extreme value, and the lowest index holding it. */
#define PAIR(T)                                                                           \
    switch (op) {                                                                         \
    case MPI_MINLOC:                                                                      \
        LOOP(T, if (a[i].v < b[i].v || (a[i].v == b[i].v && a[i].k < b[i].k)) b[i] = a[i]); \
        return MPI_SUCCESS;                                                               \
    case MPI_MAXLOC:                                                                      \
        LOOP(T, if (a[i].v > b[i].v || (a[i].v == b[i].v && a[i].k < b[i].k)) b[i] = a[i]); \
        return MPI_SUCCESS;                                                               \
    default: return MPI_ERR_OP;                                                           \
    }

/* inout[i] = in[i] op inout[i] for n elements of t. */
int reduce_apply(MPI_Op op, MPI_Datatype t, const void *in, void *inout, size_t n) {
    size_t i;
    if ((op & KIND_MASK) != KIND_OP || op <= (KIND_OP | 0) || op > MPI_MAXLOC) return MPI_ERR_OP;
    switch (t) {
    case MPI_CHAR: INTEGER(char)
    case MPI_SIGNED_CHAR: INTEGER(signed char)
    case MPI_UNSIGNED_CHAR: INTEGER(unsigned char)
    case MPI_BYTE: BYTES(unsigned char)
    case MPI_SHORT: INTEGER(short)
    case MPI_UNSIGNED_SHORT: INTEGER(unsigned short)
    case MPI_INT: INTEGER(int)
    case MPI_UNSIGNED: INTEGER(unsigned)
    case MPI_LONG: INTEGER(long)
    case MPI_UNSIGNED_LONG: INTEGER(unsigned long)
    case MPI_LONG_LONG_INT: INTEGER(long long)
    case MPI_UNSIGNED_LONG_LONG: INTEGER(unsigned long long)
    case MPI_FLOAT: FLOATING(float)
    case MPI_DOUBLE: FLOATING(double)
    case MPI_LONG_DOUBLE: FLOATING(long double)
    case MPI_WCHAR: INTEGER(wchar_t)
    case MPI_C_BOOL: LOGICAL(bool)
    case MPI_INT8_T: INTEGER(int8_t)
    case MPI_INT16_T: INTEGER(int16_t)
    case MPI_INT32_T: INTEGER(int32_t)
    case MPI_INT64_T: INTEGER(int64_t)
    case MPI_UINT8_T: INTEGER(uint8_t)
    case MPI_UINT16_T: INTEGER(uint16_t)
    case MPI_UINT32_T: INTEGER(uint32_t)
    case MPI_UINT64_T: INTEGER(uint64_t)
    case MPI_C_FLOAT_COMPLEX: COMPLEX(float _Complex)
    case MPI_C_DOUBLE_COMPLEX: COMPLEX(double _Complex)
    case MPI_AINT: INTEGER(MPI_Aint)
    case MPI_OFFSET: INTEGER(MPI_Offset)
    case MPI_COUNT: INTEGER(MPI_Count)
    case MPI_FLOAT_INT: PAIR(struct pair_f)
    case MPI_DOUBLE_INT: PAIR(struct pair_d)
    case MPI_LONG_INT: PAIR(struct pair_l)
    case MPI_2INT: PAIR(struct pair_i)
    case MPI_SHORT_INT: PAIR(struct pair_s)
    case MPI_LONG_DOUBLE_INT: PAIR(struct pair_ld)
    default: return MPI_ERR_TYPE;
    }
}
