# RUN: %PYTHON %s | filecheck %s
# The lit environment runs this checkout's interpreter, with etc importable.
import etc

print("etc package:", etc.__name__)
# CHECK: etc package: etc
