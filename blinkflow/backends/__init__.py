"""blinkflow.backends"""
