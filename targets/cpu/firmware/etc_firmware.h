/* etc_firmware.h: the bare-metal harness etc's Cortex-M examples, tests and benchmarks run on
 * (under QEMU's mps2/mps3 boards, or a real board with a debugger that does semihosting).
 *
 * startup.c: the vector table, the reset handler (.data copied, .bss zeroed, the FPU and MVE enabled,
 * then main(), whose return value becomes the exit status), fault handlers that report and exit.
 * semihost.c: output and exit through Arm semihosting (`bkpt 0xAB`): QEMU's
 * `-semihosting-config enable=on,target=native` prints to its stdout and exits with the status.
 * No C library stdio, no heap: a firmware linked with it needs only memcpy/memset from libc. */
#ifndef ETC_FIRMWARE_H
#define ETC_FIRMWARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Output, buffered per line (one semihosting call a line). */
void fw_puts(const char *text);               /* text as it is */
void fw_put_int(long value);
void fw_put_float(float value, int decimals); /* fixed point: -12.3456 */
void fw_newline(void);                        /* flush the line */
void fw_exit(int status) __attribute__((noreturn));

/* Time as QEMU counts it: SysTick on the CPU clock, its 24-bit wraps counted by the SysTick
 * interrupt. Under `-icount shift=0` the virtual clock advances one nanosecond per instruction,
 * so fw_instructions() is the instructions executed since fw_ticks_start() (calibrated once by a
 * loop of known length: the CPU clock differs per board). */
void fw_ticks_start(void);
uint64_t fw_ticks(void);
uint64_t fw_instructions(void);

/* Stack painting: fw_stack_paint() fills the free stack below its caller with a pattern; read
 * sp = fw_sp() right before a call, and after it fw_stack_used(sp) is how deep below sp anything
 * wrote: the call's stack use, exactly for code whose depth does not depend on its data (a call
 * using under about 64 bytes reads as about 64: the paint stops short of its own frame). */
void fw_stack_paint(void);
size_t fw_stack_used(uintptr_t sp);
static inline __attribute__((always_inline)) uintptr_t fw_sp(void) {
    uintptr_t sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    return sp;
}

#ifdef __cplusplus
}
#endif
#endif /* ETC_FIRMWARE_H */
