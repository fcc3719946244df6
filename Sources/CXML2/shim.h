// libxml2's SAX2 push parser for the Import module (the one module that calls it): GPX and KML
// are read as a stream of events, never as a tree. `xmlFree` is a global function pointer,
// which Swift imports as an optional variable: a plain function to call it.
#ifndef FINDMY_CXML2_SHIM_H
#define FINDMY_CXML2_SHIM_H

#include <libxml/parser.h>
#include <libxml/SAX2.h>
#include <libxml/xmlmemory.h>

static inline void findmy_xml_free(void *pointer) {
    xmlFree(pointer);
}

#endif
