"""blinkflow.sim"""
