import CXML2

/// libxml2's SAX2 handlers, the tree-building ones replaced by ones that queue events: the DTD's
/// handlers stay libxml2's (an entity declaration is kept so that a reference to it is checked and
/// passed over), except that an external subset is never loaded, and a reference is passed over.
func makeSAXHandler() -> xmlSAXHandler {
    var handler = xmlSAXHandler()
    _ = xmlSAXVersion(&handler, 2)
    handler.startElementNs = { context, name, _, namespace, _, _, count, _, attributes in
        XMLSAXEvents.of(context)?.start(name, namespace, Int(count), attributes)
    }
    handler.endElementNs = { context, name, _, namespace in
        XMLSAXEvents.of(context)?.end(name, namespace)
    }
    handler.characters = { context, bytes, count in
        XMLSAXEvents.of(context)?.characters(bytes, Int(count), isCDATA: false)
    }
    handler.ignorableWhitespace = handler.characters
    handler.cdataBlock = { context, bytes, count in
        XMLSAXEvents.of(context)?.characters(bytes, Int(count), isCDATA: true)
    }
    handler.getEntity = { context, name in
        guard let entity = xmlSAX2GetEntity(context, name) else { return nil }
        guard let events = XMLSAXEvents.shared(context) else { return entity }
        return events.entityReferenced(entity) ? entity : nil
    }
    handler.reference = { _, _ in }
    handler.externalSubset = nil
    handler.startElement = nil
    handler.endElement = nil
    handler.comment = nil
    handler.processingInstruction = nil
    handler.setDocumentLocator = nil
    handler.serror = xmlKeepFirstError
    return handler
}
