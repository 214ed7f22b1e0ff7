while sleep 30; do
  echo "t=$(( $(date +%s) - T0 )) $(df -h /tmp | tail -1 | awk '{print $3,$4}') $(free -g | awk '/Mem/{print $7}')GiB-avail $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')" >> $R/resources.txt
done
