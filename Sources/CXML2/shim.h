// libxml2's streaming reader (xmlTextReader) for the Import module (the one module that calls it):
// GPX and KML are read as a pull stream, never as a tree. `xmlFree` is a global function pointer,
// which Swift imports as an optional variable: a plain function to call it.
#ifndef FINDMY_CXML2_SHIM_H
#define FINDMY_CXML2_SHIM_H

#include <libxml/xmlreader.h>
#include <libxml/xmlmemory.h>

static inline void findmy_xml_free(void *pointer) {
    xmlFree(pointer);
}

#endif
