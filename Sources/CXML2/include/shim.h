// libxml2's SAX2 push parser for the Import module (the one module that calls it): GPX and KML
// are read as a stream of events, never as a tree. Loaded by loader.c with the first XML import
// rather than linked: a server that never imports (most, while they ingest) would otherwise map
// libxml2 and the libraries only it needs (libicu's data among them), relocated pages of each
// resident (docs/benchmarks.md, "Libraries loaded on first use"). The xml* functions Import calls
// are defined in loader.c under their own names and call libxml2's through dlsym; the headers
// come from libxml2-dev.
#ifndef FINDMY_CXML2_SHIM_H
#define FINDMY_CXML2_SHIM_H

#include <libxml/parser.h>
#include <libxml/SAX2.h>

/// Loads libxml2 (libxml2.so.2) and looks up the functions Import calls, once; NULL when done,
/// else why it could not be (the library missing, or a function missing from it). Every function
/// loader.c defines loads it too, and ends the process with that text when it cannot: callers
/// load first.
const char *findmy_xml2_load(void);

#endif
