/* startup.c: vector table and reset handler of etc's Cortex-M firmware (see etc_firmware.h). */
#include <stdint.h>
#include <string.h>

#include "etc_firmware.h"

extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end, __stack_top;
extern int main(void);
void fw_systick_handler(void);

#define CPACR (*(volatile uint32_t *)0xE000ED88u)
#define CFSR (*(volatile uint32_t *)0xE000ED28u)

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void) {
    /* CP10 and CP11 full access: the FPU (and on Armv8.1-M, MVE) before any float instruction. */
    CPACR |= 0xFu << 20;
    __asm volatile("dsb\n isb" ::: "memory");
    memcpy(&__data_start, &__data_load, (size_t)((char *)&__data_end - (char *)&__data_start));
    memset(&__bss_start, 0, (size_t)((char *)&__bss_end - (char *)&__bss_start));
    fw_exit(main());
}

static void report_fault(const char *what) {
    fw_newline();
    fw_puts("fault: ");
    fw_puts(what);
    fw_puts(" CFSR=");
    fw_put_int((long)CFSR);
    fw_newline();
    fw_exit(125);
}

static void hard_fault(void) { report_fault("HardFault"); }
static void mem_fault(void) { report_fault("MemManage"); }
static void bus_fault(void) { report_fault("BusFault"); }
static void usage_fault(void) { report_fault("UsageFault"); }
static void other_fault(void) { report_fault("unexpected exception"); }

/* The first 16 entries: the initial stack pointer, then the exceptions of the Armv7-M/Armv8-M core. */
__attribute__((section(".vectors"), used)) static const void *const vectors[16] = {
    &__stack_top, (const void *)Reset_Handler, (const void *)other_fault, (const void *)hard_fault,
    (const void *)mem_fault, (const void *)bus_fault, (const void *)usage_fault, (const void *)other_fault,
    0, 0, 0, (const void *)other_fault, (const void *)other_fault, 0, (const void *)other_fault,
    (const void *)fw_systick_handler,
};
