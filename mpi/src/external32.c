/* external32 (MPI-2 9.5.2), the form of user data between IMPI clients
 * (seed 003, 1.2.2: packed at the source, unpacked at the destination):
 * big-endian two's complement integers and IEEE floats, each type at a
 * fixed size: char/byte/bool 1, short 2, int 4, long 4, long long 8,
 * float 4, double 8, long double 16 (IEEE binary128), wchar 2,
 * fixed-width integers as named, MPI_Aint/Offset/Count 8, complex as a
 * pair of its floats, the pair types (MPI_DOUBLE_INT...) as their two
 * members without padding. A value that does not fit its size (a long
 * beyond 32 bits, a wide char beyond 16) fails with MPI_ERR_CONVERSION,
 * never truncated; so does an incoming value this process cannot hold. */
#define _GNU_SOURCE
#include "impl.h"

#include <float.h>
#include <stdbool.h>
#include <string.h>
#include <wchar.h>

enum kind { NONE, SINT, UINT, FLT, LDBL };

/* One member of an element: its kind, native offset and size, wire size. */
struct field {
    unsigned char kind, off, nsize, esize;
};
/* A type: up to two members; `esize` bytes per element on the wire. */
struct layout {
    struct field f[2];
    int esize;
};

#define ONE(K, T, E) {{{K, 0, sizeof(T), E}, {NONE, 0, 0, 0}}, E}
#define TWO(K, T, E) {{{K, 0, sizeof(T), E}, {K, sizeof(T), sizeof(T), E}}, 2 * (E)}
#define PAIR(K, S, E)                                                                         \
    {{{K, offsetof(struct S, v), sizeof(((struct S *)0)->v), E},                               \
      {SINT, offsetof(struct S, k), sizeof(int), 4}},                                          \
     (E) + 4}

/* By index in the handle (type_size's order); index 0 is no type. */
static const struct layout layouts[NTYPES] = {
    {{{NONE, 0, 0, 0}, {NONE, 0, 0, 0}}, 0},
    ONE(UINT, char, 1),
    ONE(SINT, signed char, 1),
    ONE(UINT, unsigned char, 1),
    ONE(UINT, unsigned char, 1), /* MPI_BYTE */
    ONE(SINT, short, 2),
    ONE(UINT, unsigned short, 2),
    ONE(SINT, int, 4),
    ONE(UINT, unsigned, 4),
    ONE(SINT, long, 4),
    ONE(UINT, unsigned long, 4),
    ONE(SINT, long long, 8),
    ONE(UINT, unsigned long long, 8),
    ONE(FLT, float, 4),
    ONE(FLT, double, 8),
    ONE(LDBL, long double, 16),
    ONE(UINT, wchar_t, 2), /* a negative wchar_t reads huge: refused */
    ONE(UINT, bool, 1),
    ONE(SINT, int8_t, 1),
    ONE(SINT, int16_t, 2),
    ONE(SINT, int32_t, 4),
    ONE(SINT, int64_t, 8),
    ONE(UINT, uint8_t, 1),
    ONE(UINT, uint16_t, 2),
    ONE(UINT, uint32_t, 4),
    ONE(UINT, uint64_t, 8),
    TWO(FLT, float, 4),  /* MPI_C_FLOAT_COMPLEX */
    TWO(FLT, double, 8), /* MPI_C_DOUBLE_COMPLEX */
    ONE(SINT, MPI_Aint, 8),
    ONE(SINT, MPI_Offset, 8),
    ONE(SINT, MPI_Count, 8),
    PAIR(FLT, pair_f, 4),
    PAIR(FLT, pair_d, 8),
    PAIR(SINT, pair_l, 4),
    PAIR(SINT, pair_i, 4),
    PAIR(SINT, pair_s, 2),
    PAIR(LDBL, pair_ld, 16),
};

static const struct layout *layout_of(MPI_Datatype t) {
    unsigned idx = (unsigned)t - (unsigned)KIND_TYPE;
    if (idx - 1u >= (unsigned)NTYPES - 1u) return NULL;
    return &layouts[idx];
}

int ext32_size(MPI_Datatype t) {
    const struct layout *l = layout_of(t);
    return l ? l->esize : -1;
}

int ext32_is_native(MPI_Datatype t) {
    const struct layout *l = layout_of(t);
    return l && l->esize == 1 && type_size(t) == 1;
}

static uint64_t get_native(const unsigned char *p, int size, int is_signed) {
    switch (size) {
    case 1: {
        uint8_t v;
        memcpy(&v, p, 1);
        return is_signed ? (uint64_t)(int64_t)(int8_t)v : v;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return is_signed ? (uint64_t)(int64_t)(int16_t)v : v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return is_signed ? (uint64_t)(int64_t)(int32_t)v : v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static void put_native(unsigned char *p, int size, uint64_t v) {
    uint8_t a = (uint8_t)v;
    uint16_t b = (uint16_t)v;
    uint32_t c = (uint32_t)v;
    switch (size) {
    case 1: memcpy(p, &a, 1); break;
    case 2: memcpy(p, &b, 2); break;
    case 4: memcpy(p, &c, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

/* Whether `v` (sign-extended if `is_signed`) fits `bytes` bytes. */
static int fits(uint64_t v, int bytes, int is_signed) {
    int64_t s = (int64_t)v;
    if (bytes >= 8) return 1;
    if (!is_signed) return v >> (8 * bytes) == 0;
    return s >= -((int64_t)1 << (8 * bytes - 1)) && s < ((int64_t)1 << (8 * bytes - 1));
}

static void put_be(unsigned char *p, int bytes, uint64_t v) {
    int i;
    for (i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (unsigned char)v;
}

static uint64_t get_be(const unsigned char *p, int bytes, int is_signed) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < bytes; i++) v = v << 8 | p[i];
    if (is_signed && bytes < 8 && (v >> (8 * bytes - 1)) & 1) v |= ~(uint64_t)0 << (8 * bytes);
    return v;
}

/* long double <-> IEEE binary128, the 16 wire bytes big-endian: as it is
 * where long double is binary128, through GCC's __float128 where it is
 * x87's 80 bits; elsewhere MPI_ERR_UNSUPPORTED_OPERATION. */
static int ldbl_pack(const unsigned char *p, unsigned char *out) {
    unsigned char le[16];
    long double v;
    int i;
    memcpy(&v, p, sizeof v);
#if LDBL_MANT_DIG == 113
    memcpy(le, &v, 16);
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__SIZEOF_FLOAT128__)
    {
        __float128 q = (__float128)v; /* exact: binary128 holds every x87 value */
        memcpy(le, &q, 16);
    }
#else
    (void)le;
    return MPI_ERR_UNSUPPORTED_OPERATION;
#endif
    for (i = 0; i < 16; i++) out[i] = le[15 - i];
    return MPI_SUCCESS;
}

static int ldbl_unpack(const unsigned char *in, unsigned char *p) {
    unsigned char le[16];
    long double v;
    int i;
    for (i = 0; i < 16; i++) le[i] = in[15 - i];
#if LDBL_MANT_DIG == 113
    memcpy(&v, le, 16);
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__SIZEOF_FLOAT128__)
    {
        __float128 q;
        memcpy(&q, le, 16);
        v = (long double)q; /* rounded to nearest, as a cast rounds */
    }
#else
    (void)v;
    return MPI_ERR_UNSUPPORTED_OPERATION;
#endif
    memcpy(p, &v, sizeof v);
    return MPI_SUCCESS;
}

static int field_pack(const struct field *f, const unsigned char *in, unsigned char *out) {
    uint64_t v;
    in += f->off;
    switch (f->kind) {
    case SINT:
    case UINT:
        v = get_native(in, f->nsize, f->kind == SINT);
        if (!fits(v, f->esize, f->kind == SINT)) return MPI_ERR_CONVERSION;
        put_be(out, f->esize, v);
        return MPI_SUCCESS;
    case FLT:
        put_be(out, f->esize, get_native(in, f->nsize, 0));
        return MPI_SUCCESS;
    case LDBL: return ldbl_pack(in, out);
    default: return MPI_ERR_TYPE;
    }
}

static int field_unpack(const struct field *f, const unsigned char *in, unsigned char *out) {
    uint64_t v;
    out += f->off;
    switch (f->kind) {
    case SINT:
    case UINT:
        v = get_be(in, f->esize, f->kind == SINT);
        if (!fits(v, f->nsize, f->kind == SINT)) return MPI_ERR_CONVERSION;
        put_native(out, f->nsize, v);
        return MPI_SUCCESS;
    case FLT:
        put_native(out, f->nsize, get_be(in, f->esize, 0));
        return MPI_SUCCESS;
    case LDBL: return ldbl_unpack(in, out);
    default: return MPI_ERR_TYPE;
    }
}

int ext32_pack(MPI_Datatype t, const void *in, size_t n, void *out) {
    const struct layout *l = layout_of(t);
    const unsigned char *src = in;
    unsigned char *dst = out;
    size_t i, ns = (size_t)type_size(t);
    int k, rc;
    if (!l) return MPI_ERR_TYPE;
    for (i = 0; i < n; i++, src += ns, dst += l->esize)
        for (k = 0; k < 2 && l->f[k].kind != NONE; k++)
            if ((rc = field_pack(&l->f[k], src, dst + (k ? l->f[0].esize : 0))) != MPI_SUCCESS)
                return rc;
    return MPI_SUCCESS;
}

int ext32_unpack(MPI_Datatype t, const void *in, size_t n, void *out) {
    const struct layout *l = layout_of(t);
    size_t i, ns = (size_t)type_size(t), es;
    unsigned char elem[32], native[64];
    int k, rc = MPI_SUCCESS;
    if (!l) return MPI_ERR_TYPE;
    es = (size_t)l->esize;
    /* In place when `in` is `out`: an element is copied out before its
     * native form is written; backwards when native elements are the
     * larger (each lands at or past its wire bytes), else forwards. */
    for (i = 0; i < n; i++) {
        size_t j = ns >= es ? n - 1 - i : i;
        memcpy(elem, (const unsigned char *)in + j * es, es);
        memset(native, 0, ns); /* padding in pairs, long double's tail */
        for (k = 0; k < 2 && l->f[k].kind != NONE; k++) {
            int r = field_unpack(&l->f[k], elem + (k ? l->f[0].esize : 0), native);
            if (r != MPI_SUCCESS && rc == MPI_SUCCESS) rc = r;
        }
        memcpy((unsigned char *)out + j * ns, native, ns);
    }
    return rc;
}
