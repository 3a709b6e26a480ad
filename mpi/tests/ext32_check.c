/* external32.c against MPI-2 9.5.2's sizes and byte order, linked from
 * librivetmpi.a (the codec is internal): each type's wire bytes for known
 * values, the round trip back, and values that do not fit refused.
 * Prints "ext32_check OK" or the first mismatch (exit 1). */
#include "impl.h"

#include <complex.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>

static int failed;

static void expect_wire(const char *what, MPI_Datatype t, const void *in, int n,
                        const unsigned char *want, int len) {
    unsigned char wire[64], back[64];
    int rc, i;
    if (ext32_size(t) * n != len) {
        printf("%s: %d wire bytes per element, want %d\n", what, ext32_size(t), len / n);
        failed = 1;
        return;
    }
    rc = ext32_pack(t, in, (size_t)n, wire);
    if (rc != MPI_SUCCESS || memcmp(wire, want, (size_t)len) != 0) {
        printf("%s: rc %d, wire", what, rc);
        for (i = 0; i < len; i++) printf(" %02x", wire[i]);
        printf("\n");
        failed = 1;
        return;
    }
    memset(back, 0, sizeof back);
    rc = ext32_unpack(t, wire, (size_t)n, back);
    if (rc != MPI_SUCCESS || memcmp(back, in, (size_t)type_size(t) * (size_t)n) != 0) {
        printf("%s: round trip differs (rc %d)\n", what, rc);
        failed = 1;
    }
}

static void expect_refused(const char *what, MPI_Datatype t, const void *in) {
    unsigned char wire[64];
    if (ext32_pack(t, in, 1, wire) != MPI_ERR_CONVERSION) {
        printf("%s: packed, want MPI_ERR_CONVERSION\n", what);
        failed = 1;
    }
}

int main(void) {
    short s = -2;
    int i = 0x01020304;
    long l = -2147483647L - 1, lbig = 2147483648L, lsmall = -2147483649L;
    unsigned long ul = 0xffffffffUL, ulbig = 0x100000000UL;
    long long ll = 0x0102030405060708LL;
    float f = 1.0f;
    double d = -2.0;
    long double ld = 1.0L, third = 1.0L / 3.0L;
    wchar_t wc = 0x1234, wbig = 0x10000;
    float _Complex fc = 1.0f + 2.0f * I;
    struct { double v; int k; } di;
    struct { short v; int k; } si;
    struct { long v; int k; } li;
    struct { long double v; int k; } ldi;
    unsigned char wire[32], back_buf[32];
    long double back;
    memset(&di, 0, sizeof di);
    memset(&si, 0, sizeof si);
    memset(&li, 0, sizeof li);
    memset(&ldi, 0, sizeof ldi);
    di.v = 0.5;
    di.k = 7;
    si.v = 1;
    si.k = -1;
    li.v = -1;
    li.k = 2;
    ldi.v = 1.0L;
    ldi.k = 3;
    {
        static const unsigned char w_s[] = {0xff, 0xfe};
        static const unsigned char w_i[] = {1, 2, 3, 4};
        static const unsigned char w_l[] = {0x80, 0, 0, 0};
        static const unsigned char w_ul[] = {0xff, 0xff, 0xff, 0xff};
        static const unsigned char w_ll[] = {1, 2, 3, 4, 5, 6, 7, 8};
        static const unsigned char w_f[] = {0x3f, 0x80, 0, 0};
        static const unsigned char w_d[] = {0xc0, 0, 0, 0, 0, 0, 0, 0};
        static const unsigned char w_ld[16] = {0x3f, 0xff};
        static const unsigned char w_wc[] = {0x12, 0x34};
        static const unsigned char w_fc[] = {0x3f, 0x80, 0, 0, 0x40, 0, 0, 0};
        static const unsigned char w_di[] = {0x3f, 0xe0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};
        static const unsigned char w_si[] = {0, 1, 0xff, 0xff, 0xff, 0xff};
        static const unsigned char w_li[] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2};
        static const unsigned char w_ldi[20] = {0x3f, 0xff, [19] = 3};
        expect_wire("MPI_SHORT", MPI_SHORT, &s, 1, w_s, 2);
        expect_wire("MPI_INT", MPI_INT, &i, 1, w_i, 4);
        expect_wire("MPI_LONG", MPI_LONG, &l, 1, w_l, 4);
        expect_wire("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, &ul, 1, w_ul, 4);
        expect_wire("MPI_LONG_LONG", MPI_LONG_LONG, &ll, 1, w_ll, 8);
        expect_wire("MPI_FLOAT", MPI_FLOAT, &f, 1, w_f, 4);
        expect_wire("MPI_DOUBLE", MPI_DOUBLE, &d, 1, w_d, 8);
        expect_wire("MPI_WCHAR", MPI_WCHAR, &wc, 1, w_wc, 2);
        expect_wire("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, &fc, 1, w_fc, 8);
        expect_wire("MPI_DOUBLE_INT", MPI_DOUBLE_INT, &di, 1, w_di, 12);
        expect_wire("MPI_SHORT_INT", MPI_SHORT_INT, &si, 1, w_si, 6);
        expect_wire("MPI_LONG_INT", MPI_LONG_INT, &li, 1, w_li, 8);
        /* long double: the x87 type's padding is not compared; by value. */
        if (ext32_pack(MPI_LONG_DOUBLE, &ld, 1, wire) != MPI_SUCCESS ||
            memcmp(wire, w_ld, 16) != 0) {
            printf("MPI_LONG_DOUBLE 1.0: %02x %02x %02x\n", wire[0], wire[1], wire[2]);
            failed = 1;
        }
        if (ext32_pack(MPI_LONG_DOUBLE, &third, 1, wire) != MPI_SUCCESS ||
            ext32_unpack(MPI_LONG_DOUBLE, wire, 1, &back) != MPI_SUCCESS || back != third) {
            printf("MPI_LONG_DOUBLE 1/3 does not come back\n");
            failed = 1;
        }
        if (ext32_pack(MPI_LONG_DOUBLE_INT, &ldi, 1, back_buf) != MPI_SUCCESS ||
            memcmp(back_buf, w_ldi, 20) != 0 || ext32_size(MPI_LONG_DOUBLE_INT) != 20) {
            printf("MPI_LONG_DOUBLE_INT differs\n");
            failed = 1;
        }
    }
    expect_refused("MPI_LONG 2^31", MPI_LONG, &lbig);
    expect_refused("MPI_LONG -2^31-1", MPI_LONG, &lsmall);
    expect_refused("MPI_UNSIGNED_LONG 2^32", MPI_UNSIGNED_LONG, &ulbig);
    expect_refused("MPI_WCHAR 0x10000", MPI_WCHAR, &wbig);
    /* In place: four MPI_LONG wire values (16 bytes) into 32 native. */
    {
        long v[4] = {1, -2, 3, -4}, w[4];
        unsigned char buf[32];
        ext32_pack(MPI_LONG, v, 4, buf);
        ext32_unpack(MPI_LONG, buf, 4, buf);
        memcpy(w, buf, sizeof w);
        if (w[0] != 1 || w[1] != -2 || w[2] != 3 || w[3] != -4) {
            printf("in place: %ld %ld %ld %ld\n", w[0], w[1], w[2], w[3]);
            failed = 1;
        }
    }
    if (ext32_size(MPI_BYTE) != 1 || !ext32_is_native(MPI_BYTE) || ext32_is_native(MPI_INT) ||
        ext32_size(MPI_AINT) != 8 || ext32_size(MPI_C_DOUBLE_COMPLEX) != 16 ||
        ext32_size(MPI_C_BOOL) != 1 || ext32_size((MPI_Datatype)0) != -1) {
        printf("sizes differ\n");
        failed = 1;
    }
    if (failed) return 1;
    printf("ext32_check OK\n");
    return 0;
}
