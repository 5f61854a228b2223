#!/bin/bash
echo $(( $(cat /opt/tiny/base) + $(cat /opt/tiny/data.txt) )) > /app/answer.txt
