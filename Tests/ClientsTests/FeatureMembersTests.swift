import Testing

@testable import Clients

/// The direct decoder finds a wanted member of `properties` by its length first: every name must
/// be found by its own bytes, and a name one byte longer or shorter by none.
@Suite struct FeatureMembersTests {
    @Test func everyPropertyIsFoundByItsName() {
        for property in FeatureMembers.Property.allCases {
            let name = Array(property.name.description.utf8)
            name.withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == property, "\(name)")
            }
            (name + [UInt8(ascii: "x")]).withUnsafeBufferPointer {
                #expect(FeatureMembers.Property(named: $0) == nil)
            }
            name.dropLast().withUnsafeBufferPointer { #expect(FeatureMembers.Property(named: $0) == nil) }
        }
    }
}

/// The direct decoder's reader knows a location's names by their length and one byte, then a
/// comparison of whole words: each name must be found by its own bytes, and neither a name one
/// byte longer or shorter nor one with any single byte changed may be taken for it.
@Suite struct LocationNameTests {
    @Test func everyNameIsFoundByItsOwnBytesOnly() {
        for name in LocationName.allCases {
            let bytes = Array(name.name.description.utf8)
            bytes.withUnsafeBufferPointer { #expect(LocationName($0) == name, "\(name)") }
            (bytes + [UInt8(ascii: "x")]).withUnsafeBufferPointer { #expect(LocationName($0) == nil) }
            bytes.dropLast().withUnsafeBufferPointer { #expect(LocationName($0) == nil) }
            for index in bytes.indices {
                var changed = bytes
                changed[index] ^= 0x01
                changed.withUnsafeBufferPointer {
                    let found = LocationName($0)
                    #expect(found == nil || found != name, "\(name) with byte \(index) changed")
                }
            }
        }
    }

    @Test func thePropertiesAreTheirOwnNames() {
        for property in FeatureMembers.Property.allCases {
            #expect(LocationName(rawValue: property.rawValue)?.property == property)
            #expect(LocationName(rawValue: property.rawValue)?.name.description == property.name.description)
        }
    }
}
