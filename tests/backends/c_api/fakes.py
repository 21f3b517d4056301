"""C source of fake PJRT plugins, built per test by the ``build_so`` fixture."""

from __future__ import annotations

# A PJRT_Api with NSLOTS function pointers, the version of MINOR, an extension chain in the
# layout of that minor and a PJRT_Plugin_Attributes returning one value of each NamedValue kind.
FAKE = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef NSLOTS
#define NSLOTS 118
#endif
#ifndef MINOR
#define MINOR 81
#endif
#ifndef API_SIZE
#define API_SIZE (40 + 8 * NSLOTS)
#endif

typedef struct {
  size_t struct_size; void* extension_start; const char* name; size_t name_size; int type;
  union { const char* s; int64_t i; const int64_t* l; float f; bool b; };
  size_t value_size;
} NamedValue;

typedef struct {
  size_t struct_size; void* extension_start;
  struct { size_t struct_size; void* extension_start; int major_version; int minor_version; } version;
  void* slots[NSLOTS];
} Api;

typedef struct NewExt { size_t struct_size; int type; struct NewExt* next; } NewExt;
typedef struct OldExt { int type; struct OldExt* next; } OldExt;

static const int64_t stablehlo[3] = {1, 13, 3};
static NamedValue attributes[5] = {
  {56, 0, "xla_version", 11, 1, {.i = 2}, 1},
  {56, 0, "stablehlo_current_version", 25, 2, {.l = stablehlo}, 3},
  {56, 0, "platform", 8, 0, {.s = "fakecpu"}, 7},
  {56, 0, "speed", 5, 3, {.f = 1.5f}, 1},
  {56, 0, "fake", 4, 4, {.b = true}, 1},
};

typedef struct { size_t struct_size; void* extension_start; const NamedValue* attributes; size_t num; } AttrArgs;
static void* plugin_attributes(AttrArgs* args) {
  args->attributes = attributes;
  args->num = 5;
  return NULL;
}

static NewExt new_second = {24, 4, NULL};
static NewExt new_first = {40, 19, &new_second};
static OldExt old_second = {1, NULL};
static OldExt old_first = {0, &old_second};
static Api api;

static void* no_op(void* args) { (void)args; return NULL; }
static void* hang(void* args) { (void)args; for (;;) sleep(1); return NULL; }

#ifdef CTOR_ABORT
__attribute__((constructor)) static void boom(void) { abort(); }
#endif

const Api* GetPjrtApi(void) {
#if defined(ABORT)
  fprintf(stderr, "F0000 fake_plugin.cc:1] Check failed: chips > 0\n");
  abort();
#elif defined(HANG)
  for (;;) sleep(1);
#elif defined(SEGV)
  *(volatile int*)8 = 1;
#elif defined(RETURN_NULL)
  return NULL;
#endif
  api.struct_size = API_SIZE;
  api.version.struct_size = 24;
  api.version.major_version = MAJOR_VALUE;
  api.version.minor_version = MINOR;
#if MINOR >= 45
  api.extension_start = &new_first;
#else
  api.extension_start = &old_first;
#endif
#ifdef CYCLE
  new_second.next = &new_first;
#endif
#ifdef WILD_NEXT
  new_second.next = (NewExt*)(uintptr_t)0x10;
#endif
  for (int i = 0; i < NSLOTS; ++i) api.slots[i] = (void*)abort;  /* present, never called */
  api.slots[3] = (void*)no_op;                          /* PJRT_Plugin_Initialize */
  api.slots[4] = (void*)plugin_attributes;
#ifdef CREATE_HANGS
  api.slots[10] = (void*)hang;                          /* PJRT_Client_Create */
#endif
  api.slots[7] = NULL;
  return &api;
}
"""


def fake(build_so, name: str, *defines: str) -> str:
    flags = [f"-D{d}" for d in defines]
    if not any(d.startswith("MAJOR_VALUE") for d in defines):
        flags.append("-DMAJOR_VALUE=0")
    return build_so(name, FAKE, *flags)
