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


# A plugin whose extension chain is Layouts -> MemoryDescriptions -> FFI, with functions that check
# their Args size like XLA's (``Unexpected <Args> size: expected N, got M``) and record what they
# were given, for the tests of the extension wrappers. LAYOUTS_SIZE sets the Layouts node's
# struct_size; its Buffer_MemoryLayout pointer is NULL. REGISTER_SIZE is the size the FFI
# register_handler checks: 52 (no api_version) or 60 (with api_version).
FAKE_EXTENSIONS = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS 118
#ifndef LAYOUTS_SIZE
#define LAYOUTS_SIZE 56
#endif
#ifndef REGISTER_SIZE
#define REGISTER_SIZE 52
#endif

typedef struct { size_t struct_size; void* extension_start; } Head;
typedef struct { int code; char message[200]; } Error;
typedef struct { size_t struct_size; void* extension_start; Error* error; } ErrorArgs;
typedef struct { size_t struct_size; void* extension_start; Error* error; const char* message; size_t size; } MessageArgs;
typedef struct { size_t struct_size; void* extension_start; Error* error; int code; } CodeArgs;
typedef struct { size_t struct_size; void* extension_start; void* context; } ContextArgs;

static void error_destroy(ErrorArgs* a) { free(a->error); }
static void error_message(MessageArgs* a) { a->message = a->error->message; a->size = strlen(a->error->message); }
static void* error_code(CodeArgs* a) { a->code = a->error->code; return NULL; }
static void* no_op(void* a) { (void)a; return NULL; }
static int context_storage;
static void* context_create(ContextArgs* a) { a->context = &context_storage; return NULL; }

static Error* size_error(const char* name, size_t expected, size_t actual) {
  if (actual >= expected) return NULL;
  Error* e = malloc(sizeof(Error));
  e->code = 3;
  snprintf(e->message, sizeof e->message, "Unexpected %s size: expected %zu, got %zu.", name, expected, actual);
  return e;
}
#define CHECK_SIZE(name, expected) do { \
    Error* e = size_error(name, expected, ((Head*)args)->struct_size); if (e) return e; } while (0)

/* -- Layouts: destroy and serialize work; buffer layout is NULL ---------------------------- */
static void* layout_destroy(void* args) { CHECK_SIZE("PJRT_Layouts_MemoryLayout_Destroy_Args", 24); return NULL; }
static void* layout_serialize(void* args) { CHECK_SIZE("PJRT_Layouts_MemoryLayout_Serialize_Args", 56); return NULL; }
static void* client_default_layout(void* args) {
  CHECK_SIZE("PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args", 56); return NULL;
}

/* -- MemoryDescriptions: three kinds, the default one last --------------------------------- */
typedef struct { const char* kind; int id; } Description;
static const Description descriptions[3] = {{"pinned_host", 11}, {"unpinned_host", 12}, {"device", 10}};
static const Description* description_list[3] = {&descriptions[0], &descriptions[1], &descriptions[2]};
typedef struct { size_t struct_size; void* extension_start; void* device_description;
                 const Description* const* list; size_t count; size_t default_index; } DescriptionsArgs;
typedef struct { size_t struct_size; void* extension_start; const Description* description;
                 const char* kind; size_t kind_size; int kind_id; } KindArgs;
static void* memory_descriptions(DescriptionsArgs* args) {
  CHECK_SIZE("PJRT_DeviceDescription_MemoryDescriptions_Args", 48);
  args->list = description_list; args->count = 3; args->default_index = 2; return NULL;
}
static void* memory_kind(KindArgs* args) {
  CHECK_SIZE("PJRT_MemoryDescription_Kind_Args", 44);
  args->kind = args->description->kind; args->kind_size = strlen(args->kind); args->kind_id = args->description->id;
  return NULL;
}

/* -- FFI: records what it was given ---------------------------------------------------------- */
typedef struct { void* deleter; void* serialize; void* deserialize; } TypeInfo;
typedef struct { size_t struct_size; void* extension_start; const char* name; size_t name_size;
                 int64_t type_id; const TypeInfo* type_info; } TypeArgs;
typedef struct { size_t struct_size; void* extension_start; void* context;
                 int64_t type_id; void* data; void* deleter; } UserDataArgs;
typedef struct { size_t struct_size; const char* target; size_t target_size; int api_version; void* handler;
                 const char* platform; size_t platform_size; unsigned traits; } VersionedArgs;
typedef struct { size_t struct_size; const char* target; size_t target_size; void* handler;
                 const char* platform; size_t platform_size; unsigned traits; } TypedArgs;

static int64_t next_type_id = 7;
static void* last_handler; static int last_api_version = -1; static char last_target[64];
static void* last_data; static void* last_deleter; static void* last_context;
void* fake_last_handler(void) { return last_handler; }
int fake_last_api_version(void) { return last_api_version; }
const char* fake_last_target(void) { return last_target; }
void* fake_last_data(void) { return last_data; }
void* fake_last_deleter(void) { return last_deleter; }
void* fake_last_context(void) { return last_context; }

static void* type_register(TypeArgs* args) {
  CHECK_SIZE("PJRT_FFI_Type_Register_Args", 48);
  if (args->type_info == NULL) abort();  /* XLA reads it unconditionally */
  if (args->type_id == 0) args->type_id = next_type_id++;
  return NULL;
}
static void* user_data_add(UserDataArgs* args) {
  CHECK_SIZE("PJRT_FFI_UserData_Add_Args", 48);
  last_context = args->context; last_data = args->data; last_deleter = args->deleter; return NULL;
}
static void* register_handler(void* args) {
  CHECK_SIZE("PJRT_FFI_Register_Handler_Args", REGISTER_SIZE);
#if REGISTER_SIZE == 60
  VersionedArgs* a = args; last_api_version = a->api_version;
#else
  TypedArgs* a = args; last_api_version = -1;
#endif
  last_handler = a->handler;
  snprintf(last_target, sizeof last_target, "%.*s@%.*s", (int)a->target_size, a->target,
           (int)a->platform_size, a->platform);
  return NULL;
}

typedef struct { size_t struct_size; int type; void* next; void* fns[7]; } Node;
static Node ffi = {48, 5, NULL, {(void*)type_register, (void*)user_data_add, (void*)register_handler}};
static Node descriptions_node = {40, 6, &ffi, {(void*)memory_descriptions, (void*)memory_kind}};
static Node layouts = {LAYOUTS_SIZE, 4, &descriptions_node,
                       {(void*)layout_destroy, (void*)layout_serialize, (void*)client_default_layout, NULL,
                        (void*)abort, (void*)abort, (void*)abort}};

typedef struct {
  size_t struct_size; void* extension_start;
  struct { size_t struct_size; void* extension_start; int major_version; int minor_version; } version;
  void* slots[NSLOTS];
} Api;
static Api api;

const Api* GetPjrtApi(void) {
  api.struct_size = 40 + 8 * NSLOTS;
  api.extension_start = &layouts;
  api.version.struct_size = 24;
  api.version.minor_version = 81;
  for (int i = 0; i < NSLOTS; ++i) api.slots[i] = (void*)abort;
  api.slots[0] = (void*)error_destroy;
  api.slots[1] = (void*)error_message;
  api.slots[2] = (void*)error_code;
  api.slots[3] = (void*)no_op;                /* PJRT_Plugin_Initialize */
  api.slots[98] = (void*)context_create;      /* PJRT_ExecuteContext_Create */
  api.slots[99] = (void*)no_op;               /* PJRT_ExecuteContext_Destroy */
  return &api;
}
"""
