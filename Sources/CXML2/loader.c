// libxml2 loaded on first use (shim.h says why). Each xml* function Import calls is defined here
// under its own name and forwards to libxml2's, looked up once; the library is opened RTLD_LOCAL,
// so nothing else in the process binds to it.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim.h"

#define FINDMY_XML2_LIBRARY "libxml2.so.2"

// The functions with a result: (result type, name, parameters, arguments).
#define FINDMY_XML2_FUNCTIONS(X)                                                                   \
    X(xmlParserCtxtPtr, xmlCreatePushParserCtxt,                                                \
        (xmlSAXHandlerPtr sax, void *user_data, const char *chunk, int size, const char *filename), \
        (sax, user_data, chunk, size, filename))                                                \
    X(int, xmlCtxtUseOptions, (xmlParserCtxtPtr ctxt, int options), (ctxt, options))            \
    X(int, xmlParseChunk, (xmlParserCtxtPtr ctxt, const char *chunk, int size, int terminate),  \
        (ctxt, chunk, size, terminate))                                                         \
    X(long, xmlByteConsumed, (xmlParserCtxtPtr ctxt), (ctxt))                                   \
    X(int, xmlSAXVersion, (xmlSAXHandler * hdlr, int version), (hdlr, version))                 \
    X(xmlEntityPtr, xmlSAX2GetEntity, (void *ctx, const xmlChar *name), (ctx, name))

// The functions without one.
#define FINDMY_XML2_PROCEDURES(X)                                  \
    X(xmlInitParser, (void), ())                                \
    X(xmlFreeParserCtxt, (xmlParserCtxtPtr ctxt), (ctxt))       \
    X(xmlFreeDoc, (xmlDocPtr cur), (cur))                       \
    X(xmlStopParser, (xmlParserCtxtPtr ctxt), (ctxt))

#define FINDMY_POINTER(result, name, parameters, arguments) static result(*real_##name) parameters;
#define FINDMY_PROCEDURE_POINTER(name, parameters, arguments) static void(*real_##name) parameters;
FINDMY_XML2_FUNCTIONS(FINDMY_POINTER)
FINDMY_XML2_PROCEDURES(FINDMY_PROCEDURE_POINTER)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int loaded;

static int look_up(void *library, const char *name, void **pointer) {
    *pointer = dlsym(library, name);
    if (*pointer == NULL) {
        snprintf(load_error, sizeof load_error, "%s has no function %s: findmy needs libxml2 2.9 or later",
            FINDMY_XML2_LIBRARY, name);
        return 0;
    }
    return 1;
}

static void load(void) {
    void *library = dlopen(FINDMY_XML2_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error,
            "libxml2 could not be loaded (%s); findmy reads GPX and KML files with it: install "
            "libxml2 (Debian: apt install libxml2)",
            dlerror());
        return;
    }
#define FINDMY_LOOK_UP(result, name, parameters, arguments) \
    if (!look_up(library, #name, (void **)&real_##name)) return;
#define FINDMY_LOOK_UP_PROCEDURE(name, parameters, arguments) \
    if (!look_up(library, #name, (void **)&real_##name)) return;
    FINDMY_XML2_FUNCTIONS(FINDMY_LOOK_UP)
    FINDMY_XML2_PROCEDURES(FINDMY_LOOK_UP_PROCEDURE)
    loaded = 1;
}

const char *findmy_xml2_load(void) {
    pthread_once(&load_once, load);
    return loaded ? NULL : load_error;
}

// Callers load first (XMLPullReader's start); one that did not ends here with the same text
// rather than calling through a null pointer.
static void require_loaded(void) {
    const char *error = findmy_xml2_load();
    if (error != NULL) {
        fprintf(stderr, "findmy: %s\n", error);
        abort();
    }
}

#define FINDMY_FORWARD(result, name, parameters, arguments) \
    result name parameters {                                \
        require_loaded();                                   \
        return real_##name arguments;                       \
    }
#define FINDMY_FORWARD_PROCEDURE(name, parameters, arguments) \
    void name parameters {                                    \
        require_loaded();                                     \
        real_##name arguments;                                \
    }
FINDMY_XML2_FUNCTIONS(FINDMY_FORWARD)
FINDMY_XML2_PROCEDURES(FINDMY_FORWARD_PROCEDURE)
