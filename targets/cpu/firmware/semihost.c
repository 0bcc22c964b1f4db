/* semihost.c: output, exit, instruction counting and stack painting for etc's firmware (see etc_firmware.h). */
#include <stdint.h>

#include "etc_firmware.h"

enum { SYS_WRITE0 = 0x04, SYS_EXIT_EXTENDED = 0x20, ADP_STOPPED_APPLICATION_EXIT = 0x20026 };

static int semihost(int operation, const void *argument) {
    register int r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static char line[128];
static unsigned used;

void fw_newline(void) {
    line[used++] = '\n';
    line[used] = 0;
    semihost(SYS_WRITE0, line);
    used = 0;
}

static void put_char(char c) {
    if (used + 2 >= sizeof line) {  /* keep room for "\n\0" */
        line[used] = 0;
        semihost(SYS_WRITE0, line);
        used = 0;
    }
    line[used++] = c;
}

void fw_puts(const char *text) {
    while (*text) {
        if (*text == '\n')
            fw_newline();
        else
            put_char(*text);
        text++;
    }
}

void fw_put_int(long value) {
    char digits[24];
    int n = 0;
    unsigned long magnitude = value < 0 ? 0ul - (unsigned long)value : (unsigned long)value;
    if (value < 0)
        put_char('-');
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    while (n)
        put_char(digits[--n]);
}

void fw_put_float(float value, int decimals) {
    if (value != value) {
        fw_puts("nan");
        return;
    }
    if (value < 0) {
        put_char('-');
        value = -value;
    }
    if (value > 2e9f) {
        fw_puts("inf");
        return;
    }
    long scale = 1;
    for (int i = 0; i < decimals; i++)
        scale *= 10;
    long fixed = (long)(value * (float)scale + 0.5f);
    fw_put_int(fixed / scale);
    if (decimals > 0) {
        put_char('.');
        long fraction = fixed % scale;
        for (long s = scale / 10; s > 0; s /= 10) {
            put_char((char)('0' + fraction / s));
            fraction %= s;
        }
    }
}

void fw_exit(int status) {
    if (used) {
        line[used] = 0;
        semihost(SYS_WRITE0, line);
        used = 0;
    }
    const uint32_t block[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)status};
    semihost(SYS_EXIT_EXTENDED, block);
    for (;;) {
    }
}

/* ---- SysTick: a 24-bit down-counter on the CPU clock; its interrupt counts the wraps. */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
static volatile uint32_t wraps;
static uint32_t per_tick_x1024;  /* instructions per tick, times 1024 (calibrated) */

void fw_systick_handler(void) { wraps++; }

static uint64_t ticks_now(void) {
    uint32_t before, value;
    do {
        before = wraps;
        value = SYST_CVR;
    } while (before != wraps);
    return (uint64_t)before * 0x1000000u + (0xFFFFFFu - value);
}

static uint64_t origin;

/* A loop of exactly 2 instructions per iteration (subs, bne). */
static void spin(uint32_t iterations) {
    __asm volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(iterations) : : "cc");
}

void fw_ticks_start(void) {
    if (!(SYST_CSR & 1u)) {
        SYST_RVR = 0xFFFFFFu;
        SYST_CVR = 0;
        SYST_CSR = 7u;  /* the processor clock, the interrupt, enabled */
        while (SYST_CVR == 0) {  /* the counter loads the reload value on its first tick */
        }
        uint64_t t0 = ticks_now();
        spin(1u << 20);
        uint64_t t1 = ticks_now();
        per_tick_x1024 = (uint32_t)(((uint64_t)2 << 20) * 1024u / (t1 - t0 ? t1 - t0 : 1));
    }
    origin = ticks_now();
}

uint64_t fw_ticks(void) { return ticks_now() - origin; }

uint64_t fw_instructions(void) { return fw_ticks() * per_tick_x1024 / 1024u; }

/* ---- stack painting */
extern uint32_t __stack_limit;
#define PAINT 0xA5C3E1F7u

void fw_stack_paint(void) {
    uintptr_t sp = fw_sp();
    for (volatile uint32_t *word = &__stack_limit; (uintptr_t)word < sp - 32; word++)
        *word = PAINT;
}

size_t fw_stack_used(uintptr_t sp) {
    const uint32_t *word = &__stack_limit;
    while ((uintptr_t)word < sp && *word == PAINT)
        word++;
    return (uintptr_t)word < sp ? (size_t)(sp - (uintptr_t)word) : 0;
}
