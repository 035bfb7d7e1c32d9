"""The course: python course/assignments.py hands out a student copy of the exercises and grades it
(ASSIGNMENTS.md)."""
