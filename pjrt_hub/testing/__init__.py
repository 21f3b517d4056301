"""(filled by the conformance issue)"""
